"""Two hosts for real: network namespaces spark-a and spark-b, a fast link and a management network between them, an
sshd on spark-b, and the product's cluster launch (real Ray from PyPI, real ssh) bringing a two-node entry's
cluster up: over the fast link, torn down on both hosts by Ctrl-C, and a worker killed in the middle of a night named
in the entry's FAIL.

vLLM's CPU engine cannot serve through Ray (`ValueError: current platform cpu does not support ray.`; tensor
parallel 2 is refused too: the model's 9 heads do not split in two), so no test here serves across the hosts.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest
import yaml

from pipeline.infra.files import sha256_of
from pipeline.infra.weights import MANIFEST, package_folder
from tests.integration.conftest import CPU_ENTRY, ROOT, CpuEngine, raise_health_limits
from tests.integration.two_hosts import (
    FAST_IFACE,
    MULTICAST_OFF,
    TwoHosts,
    head_link_bytes,
    left_in,
    named_pids,
    set_worker_fast_link,
    stop_gently,
    two_hosts,
)

ENTRY = "smollm2-135m-pp2"
PYTHON = str(ROOT / ".venv" / "bin" / "python")

pytestmark = pytest.mark.integration


@pytest.fixture()
def sparks(tmp_path: Path, cpu_engine: CpuEngine) -> Iterator[tuple[TwoHosts, dict[str, str]]]:
    """The two hosts, a configuration with the CPU model as a two-node pipeline-parallel entry, and the runner's
    cluster.yaml naming both hosts by their fast link (the worker's cache in a folder of its own, so the weights
    are shipped there)."""
    with two_hosts(tmp_path / "hosts") as hosts:
        yield hosts, _configuration(tmp_path, hosts, cpu_engine)
        assert left_in(hosts) == [], "processes outlived the cluster in the two namespaces"


def _configuration(tmp_path: Path, hosts: TwoHosts, engine: CpuEngine) -> dict[str, str]:
    config = tmp_path / "config"
    config.mkdir()
    shutil.copytree(ROOT / "thresholds", config / "thresholds")
    shutil.copytree(ROOT / "golden", config / "golden")
    shutil.copy(
        ROOT / "thresholds" / "cpu-x86" / f"{CPU_ENTRY}.yaml", config / "thresholds" / "cpu-x86" / f"{ENTRY}.yaml"
    )
    data = yaml.safe_load((ROOT / "models.yaml").read_text())
    (cpu,) = [e for e in data["models"] if e["id"] == CPU_ENTRY]
    data["models"].append(
        cpu
        | {
            "id": ENTRY,
            "weights": {"from": "path", "path": str(package_folder(engine.entry, engine.cache_dir))},
            "launch": cpu["launch"] | {"target": "ray"},
            "serve": cpu["serve"] | {"pipeline_parallel_size": 2, "distributed_executor_backend": "ray"},
            "env": {"VLLM_CPU_KVCACHE_SPACE": "1"},
            "topology": {"mode": "cluster", "nodes": 2},
            "required": False,
        }
    )
    # the night times nothing (vLLM refuses Ray before any measurement) and runs beside other tests
    raise_health_limits(data)
    (config / "models.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    cluster = {
        "version": 1,
        "profile": "cpu",
        "ssh_config": str(hosts.ssh_config),
        "nodes": [
            {
                "name": "spark-a",
                "interconnect": {"interface": FAST_IFACE, "address": hosts.fast_a},
                "env": MULTICAST_OFF | {HOST_MARK: "spark-a"},
            },
            {
                "name": "spark-b",
                "interconnect": {"interface": FAST_IFACE, "address": hosts.fast_b},
                "cache_dir": str(tmp_path / "worker-cache"),
                "env": MULTICAST_OFF | {HOST_MARK: "spark-b"},
            },
        ],
    }
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(cluster, sort_keys=False))
    return os.environ | {
        "SPARK_NIGHTLY_PATHS_CONFIG": str(config),
        "SPARK_NIGHTLY_PATHS_CLUSTER": str(tmp_path / "cluster.yaml"),
        "SPARK_NIGHTLY_PATHS_RUNS": str(tmp_path / "runs"),
        "SPARK_NIGHTLY_PATHS_STATE": str(tmp_path / "state"),
        "SPARK_NIGHTLY_PATHS_CACHE": str(engine.cache_dir),
    }


# a mark of each host's own, beside the multicast variables (MULTICAST_OFF): the node's `env` of cluster.yaml reaches
# its Ray processes, across ssh on the worker
HOST_MARK = "TWO_HOSTS_TEST_NODE"


def _ray_environments(ns: str) -> list[dict[str, str]]:
    """The environment of each Ray daemon (raylet, gcs_server) running in namespace `ns`."""
    found = []
    for pid, name in named_pids(ns):
        if name in ("raylet", "gcs_server"):
            try:
                raw = Path(f"/proc/{pid}/environ").read_bytes()
            except OSError:
                continue
            found.append(dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item))
    return found


def _connections(ns: str) -> list[tuple[str, str]]:
    """Established TCP connections in a namespace, as (local address, peer address), ports dropped and IPv4 read
    out of its IPv6 form ([::ffff:10.64.1.1]:6379 -> 10.64.1.1)."""
    out = subprocess.run(
        ["ip", "netns", "exec", ns, "ss", "-Htn", "state", "established"], capture_output=True, text=True, check=True
    ).stdout
    pairs = []
    for fields in (line.split() for line in out.splitlines()):
        if len(fields) >= 4:
            local, peer = (_address(end) for end in fields[-2:])
            pairs.append((local, peer))
    return pairs


def _address(end: str) -> str:
    host, port = end.rsplit(":", 1)
    return host.strip("[]").removeprefix("::ffff:") + f":{port}"


def _driver(hosts: TwoHosts, env: dict[str, str], tmp_path: Path) -> subprocess.Popen[str]:
    """The head holding the entry's cluster (tests/integration/cluster_driver.py), started on spark-a."""
    return subprocess.Popen(
        hosts.on_head([PYTHON, "-m", "tests.integration.cluster_driver", ENTRY, str(tmp_path / "driver")]),
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _drained(stream: IO[str]) -> tuple[list[str], threading.Thread]:
    """The stream's lines as they come, read on a thread of their own (a driver never blocks on a full pipe), and
    that thread, which ends with the stream."""
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(stream), daemon=True)
    reader.start()
    return lines, reader


def _stuck(driver: subprocess.Popen[str], stderr: list[str]) -> str:
    """Where a driver that did not stop is: its signal masks and every thread's stack (faulthandler, on SIGUSR1)."""
    status = Path(f"/proc/{driver.pid}/status").read_text()
    masks = [line for line in status.splitlines() if line.startswith(("SigBlk", "SigIgn", "SigCgt"))]
    driver.send_signal(signal.SIGUSR1)
    time.sleep(2)
    return "\n".join(masks) + "\n" + "".join(stderr)


def test_the_cluster_comes_up_over_the_fast_link_and_ctrl_c_stops_it_on_both_hosts(
    sparks: tuple[TwoHosts, dict[str, str]], tmp_path: Path
) -> None:
    hosts, env = sparks
    driver = _driver(hosts, env, tmp_path)
    try:
        assert driver.stdout is not None and driver.stderr is not None
        stderr, reader = _drained(driver.stderr)
        ready = driver.stdout.readline()
        assert ready == f"READY {hosts.fast_a} {hosts.fast_b}\n", "".join(stderr)
        # Ray's own traffic runs between the fast-link addresses only: the management network carries ssh alone
        for ns in (hosts.head_ns, hosts.worker_ns):
            ray = [(a, b) for a, b in _connections(ns) if not a.endswith(":22") and not b.endswith(":22")]
            between = [(a, b) for a, b in ray if not (a.startswith("127.") or b.startswith("127."))]
            assert between and all(a.rsplit(":", 1)[0] in (hosts.fast_a, hosts.fast_b) for a, _ in between), between
            assert all(b.rsplit(":", 1)[0] in (hosts.fast_a, hosts.fast_b) for _, b in between), between
        # each host's Ray runs with that host's own variables from cluster.yaml, the fast link's beside them
        for ns, host, address in ((hosts.head_ns, "spark-a", hosts.fast_a), (hosts.worker_ns, "spark-b", hosts.fast_b)):
            daemons = _ray_environments(ns)
            assert daemons, f"no Ray daemon in {ns}"
            for environ in daemons:
                assert environ.get(HOST_MARK) == host and environ.get("VLLM_HOST_IP") == address, (ns, environ)
                assert all(environ.get(k) == v for k, v in MULTICAST_OFF.items()), (ns, environ)
        driver.send_signal(signal.SIGINT)  # Ctrl-C on the head
        try:
            code = driver.wait(120)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the driver did not stop within 120 s of Ctrl-C:\n{_stuck(driver, stderr)}")
        assert code != 0
        reader.join(10)
        assert "cluster: stopped on spark-a, spark-b" in "".join(stderr), stderr
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    # the fixture checks that nothing is left in either namespace


def test_a_worker_killed_mid_night_fails_the_entry_naming_the_node(
    sparks: tuple[TwoHosts, dict[str, str]], tmp_path: Path, cpu_engine: CpuEngine
) -> None:
    hosts, env = sparks
    fast_before, mgmt_before = head_link_bytes(hosts)
    started = time.monotonic()
    night = [str(ROOT / ".venv" / "bin" / "spark-nightly"), "nightly", "--only", ENTRY, "--no-publish"]
    process = subprocess.Popen(
        hosts.on_head(night), cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    out: list[str] = []
    try:
        assert process.stdout is not None
        for line in process.stdout:
            out.append(line)
            if "cluster ready: " in line:  # the API server boots now: the worker's raylet is killed under it
                (raylet,) = [pid for pid, name in named_pids(hosts.worker_ns) if name == "raylet"]
                os.kill(raylet, signal.SIGKILL)  # a process of this test's night, by its pid
        process.wait(300)
    finally:
        if process.poll() is None:  # the test failed under it: SIGTERM lets the night stop its cluster on both hosts
            stop_gently(process, 60)
    text = "".join(out)
    elapsed = time.monotonic() - started
    fast_after, mgmt_after = head_link_bytes(hosts)
    fast, mgmt = fast_after - fast_before, mgmt_after - mgmt_before
    assert "cluster: shipping the weights to spark-b" in text, text
    assert f"cluster ready: spark-a ({hosts.fast_a}), spark-b ({hosts.fast_b})" in text, text
    assert "cluster: stopped on spark-a, spark-b" in text, text
    (run,) = (tmp_path / "runs").iterdir()
    (outcome,) = [o for o in json.loads((run / "run.json").read_text())["entries"] if o["entry"] == ENTRY]
    assert (outcome["status"], outcome["stage"]) == ("FAIL", "cluster"), outcome
    assert outcome["reason"].startswith("node spark-b: worker: Ray's worker exited with code "), outcome
    # the reason says what `ray start --block` reported dead, not the last INFO line it printed before
    assert "raylet" in outcome["reason"] and " INFO " not in outcome["reason"], outcome["reason"]
    # the summary says how the entry was split over which hosts, and that they came up before the worker was lost
    summary = (run / "summary.md").read_text()
    named = f"spark-a ({FAST_IFACE} {hosts.fast_a}), spark-b ({FAST_IFACE} {hosts.fast_b})"
    assert f"- {ENTRY}: pipeline parallel 2 over {named}; hosts up in " in summary, summary
    # the weights shipped to the worker's cache are the head's, file by file
    head = package_folder(cpu_engine.entry, cpu_engine.cache_dir)
    shipped = tmp_path / "worker-cache" / head.relative_to(cpu_engine.cache_dir)
    manifest = json.loads((head / MANIFEST).read_text())["files"]
    assert {name: sha256_of(shipped / name) for name in manifest} == manifest
    # Ray's probe hands 16 MiB from the worker to the head over the fast link; the weights went over ssh (management)
    assert fast > 16 << 20, (fast, mgmt)
    print(f"two-host night: {elapsed:.1f} s; fast link {fast / 2**20:.1f} MiB, management {mgmt / 2**20:.1f} MiB")


def test_a_fast_link_down_before_the_night_makes_the_entry_inconclusive_naming_the_link(
    sparks: tuple[TwoHosts, dict[str, str]], tmp_path: Path
) -> None:
    hosts, env = sparks
    set_worker_fast_link(hosts, up=False)
    night = [str(ROOT / ".venv" / "bin" / "spark-nightly"), "nightly", "--only", ENTRY, "--no-publish"]
    done = subprocess.run(
        hosts.on_head(night), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    text = done.stdout + done.stderr
    (run,) = (tmp_path / "runs").iterdir()
    (outcome,) = [o for o in json.loads((run / "run.json").read_text())["entries"] if o["entry"] == ENTRY]
    # the host, not the build: the link named at both ends (a veth end whose peer is down is down), before any Ray
    assert (outcome["status"], outcome["stage"]) == ("INCONCLUSIVE", "cluster"), outcome
    # the head's end reads `down` or `lowerlayerdown` by kernel (a veth end whose peer is down has no carrier)
    assert re.fullmatch(
        f"node spark-a, spark-b: link: the fast link is not up \\(spark-a: {FAST_IFACE} (lowerlayer)?down; "
        f"spark-b: {FAST_IFACE} down\\): no build is judged over it",
        outcome["reason"],
    ), outcome
    assert "cluster: Ray head" not in text, text
    # the fixture checks that nothing is left in either namespace
