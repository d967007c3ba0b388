"""The two-host test's head: brings an entry's cluster up as boot() does and holds it until stdin closes.

Run on spark-a (in its network namespace) with the settings in the environment:
`python -m tests.integration.cluster_driver ENTRY LOG_DIR`. Prints `READY <nodes>` once the readiness sequence
passed, then `LOST <error>` if a node is lost while held; exits 0 when stdin closes, 3 after a loss, 4 when the
sequence failed (its error printed as `FAILED <error>`). Every node's Ray is stopped before it exits.
"""

from __future__ import annotations

import faulthandler
import select
import signal
import sys
from pathlib import Path

from pipeline.config.bundle import ConfigPaths, load_config
from pipeline.errors import ClusterError
from pipeline.infra.cluster_launch import cluster_up
from pipeline.infra.server import free_port, owner_token
from pipeline.infra.weights import model_reference
from pipeline.settings import from_environment
from pipeline.stages.prove.boot import plan_launch, prepare_candidate, weights_hashes
from tests.shops import online


def main(entry_id: str, log_dir: Path) -> int:
    # as the CLI does (pipeline/cli.py): started by a suite that a non-interactive shell put in the background,
    # this process inherits SIGINT ignored, and Ctrl-C would never reach the tear-down
    signal.signal(signal.SIGINT, signal.default_int_handler)
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the test asks where a driver that hangs is stuck
    settings = from_environment().settings
    root = settings.places.config
    paths = ConfigPaths(root / "models.yaml", root / "thresholds", root / "golden", settings.places.cluster)
    config = load_config(paths)
    entry = config.matrix.entry(entry_id)
    cache_dir = settings.places.cache
    candidate = prepare_candidate(config.matrix.profiles[entry.profile], online(cache_dir), log_dir)
    model_ref = model_reference(entry, online(cache_dir), log_dir)
    plan = plan_launch(entry, candidate, model_ref=model_ref, port=free_port(), cache_dir=cache_dir)
    assert plan.cluster is not None, f"{entry_id} is not a cluster entry"

    def say(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    try:
        with cluster_up(
            plan.cluster,
            log_dir,
            files=weights_hashes(cache_dir, plan.cluster.weights),
            owner=owner_token("cluster-driver"),
            say=say,
        ) as running:
            print("READY " + " ".join(s.node.address for s in plan.cluster.nodes), flush=True)
            while True:
                if (lost := running.lost()) is not None:
                    print(f"LOST {lost} ({'host lost' if lost.host_lost else 'Ray failed'})", flush=True)
                    return 3
                readable, _, _ = select.select([sys.stdin], [], [], 0.2)
                if readable and not sys.stdin.readline():
                    return 0
    except ClusterError as exc:
        print(f"FAILED {exc}", flush=True)
        return 4


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], Path(sys.argv[2])))
