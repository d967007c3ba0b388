"""Two hosts on a machine with two GPUs (docs/gpu.md, "Two hosts"): network namespaces spark-a and spark-b joined by
a fast link and a management network (tests/integration/two_hosts.py, as the CPU tests make them), one GPU each
through cluster.yaml's node variables, sshd on spark-b, and `spark-nightly nightly --profile gpu` on spark-a serving
the cluster entry across them through Ray and NCCL. Run by `benchmarks/gpu_nights.sh WH WORK two-hosts`, whose
environment (the gate's venv, paths, offline) it uses; each case's verdict and figures are printed.

    python -m benchmarks.gpu_two_hosts WORK [CASES]     CASES (default: all but cluster, in this order) from below

pass: the whole gpu profile (the solo entry on one GPU beside the cluster entry on two), the links' bytes over the
night; bench: the cluster entry's cells by `spark-nightly bench` (its tok/s beside the solo entry's, also when its
golden stops its night before perf); solo-reference: the cluster entry's golden judged against the solo entry's
reference of the pass night (`spark-nightly golden`: the solo's answers scored again under the split, token for
token, so a different path at a near tie is told from different numbers); cluster: the cluster entry alone,
pass's proof of serving across the hosts for a sitting short of time; kill:
the worker's raylet killed once the cluster is ready (the entry FAILs naming spark-b); link-down: the fast link down
on spark-b before the night (INCONCLUSIVE naming the link); ctrl-c: SIGINT to the night once the cluster is ready
(the cluster stopped on both hosts). After each, what still runs in either namespace is listed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import yaml

from tests.integration.two_hosts import (
    FAST_IFACE,
    HEAD_NAME,
    MULTICAST_OFF,
    WORKER_NAME,
    TwoHosts,
    head_link_bytes,
    left_in,
    named_pids,
    set_worker_fast_link,
    stop_gently,
    two_hosts,
)

HERE = Path(__file__).resolve().parents[1]
CLUSTER_ENTRY = "smollm2-135m-instruct-gpu-pp2"
SOLO_ENTRY = "smollm2-135m-instruct-gpu"
CASES = ("pass", "bench", "solo-reference", "kill", "link-down", "ctrl-c")
CHOICES = (*CASES, "cluster")
# what a node's Ray (started over ssh, with sshd's own environment) needs of the night's to find the toolchain that
# FlashInfer's JIT compiles with, on the worker as on the head
CARRIED = ("PATH", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH")
NIGHT_TIMEOUT_S = 1500
# NCCL names the network it took and each channel's transport ("via NET/Socket/0", or "via P2P/..." had the two
# namespaces' GPUs found each other on this machine's NVLink), which the server's log keeps (Ray forwards it)
NCCL_SAYS = {"NCCL_DEBUG": "INFO"}
NCCL_LINES = ("Using network", "NET/Socket : Using", "NET/IB : Using", " via ")


def own_gpu(index: int) -> dict[str, str]:
    # CUDA_DEVICE_ORDER: a node's GPU index is NVML's (the health gate's)
    return {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": str(index)}


def cluster_file(work: Path, hosts: TwoHosts) -> Path:
    """The runner's cluster.yaml: each host on its end of the fast link with a GPU of its own; the worker's cache a
    folder of its own, so the weights are shipped to it as to a second Spark."""
    nodes = []
    carried = {variable: os.environ[variable] for variable in CARRIED if os.environ.get(variable)}
    for gpu, (name, address) in enumerate(((HEAD_NAME, hosts.fast_a), (WORKER_NAME, hosts.fast_b))):
        node: dict[str, object] = {
            "name": name,
            "interconnect": {"interface": FAST_IFACE, "address": address},
            "env": MULTICAST_OFF | carried | NCCL_SAYS | own_gpu(gpu),
        }
        if name == WORKER_NAME:
            node["cache_dir"] = str(work / "worker-cache")
        nodes.append(node)
    path = work / "cluster.yaml"
    cluster = {"version": 1, "profile": "gpu", "ssh_config": str(hosts.ssh_config), "nodes": nodes}
    path.write_text(yaml.safe_dump(cluster, sort_keys=False))
    return path


# the night's lines that open and close the cluster's life: the links' bytes between them are Ray's and NCCL's, with
# the weights shipped before (over ssh) left out
CLUSTER_READY = "cluster ready: "
CLUSTER_MARKS = (CLUSTER_READY, "cluster: stopped")


def night(
    hosts: TwoHosts,
    env: dict[str, str],
    log: Path,
    *args: str,
    on_ready: str = "",
    marks: dict[str, tuple[int, int]] | None = None,
) -> tuple[int, str, float]:
    """One night on spark-a; `on_ready` ("kill" or "ctrl-c") acts once the cluster is ready; `marks` takes the links'
    bytes at each of CLUSTER_MARKS. Its exit code, its output and its time."""
    argv = [sys.executable, "-m", "pipeline", "nightly", "--profile", "gpu", *args]
    started = time.monotonic()
    with log.open("w") as out:
        process = subprocess.Popen(
            hosts.on_head(argv), cwd=HERE, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        assert process.stdout is not None
        # a hung night is stopped (SIGTERM: it stops its cluster on both hosts), which ends its output below
        limit = threading.Timer(NIGHT_TIMEOUT_S, process.terminate)
        limit.start()
        try:
            for line in process.stdout:
                out.write(line)
                out.flush()
                for mark in CLUSTER_MARKS:
                    if marks is not None and mark in line and mark not in marks:
                        marks[mark] = head_link_bytes(hosts)
                if on_ready and CLUSTER_READY in line:
                    act(hosts, process, on_ready)
                    on_ready = ""
            process.wait(NIGHT_TIMEOUT_S)
        finally:
            limit.cancel()
            if process.poll() is None:  # the night hung: SIGTERM lets it stop its cluster on both hosts
                stop_gently(process, 120)
    return process.returncode, log.read_text(), time.monotonic() - started


def act(hosts: TwoHosts, process: subprocess.Popen[str], what: str) -> None:
    if what == "kill":
        raylets = [pid for pid, name in named_pids(hosts.worker_ns) if name == "raylet"]
        print(f"  killing spark-b's raylet {raylets}", flush=True)
        for pid in raylets:  # Ray's process of this night, by its pid
            os.kill(pid, signal.SIGKILL)
    else:
        print(f"  Ctrl-C to the night ({process.pid})", flush=True)
        process.send_signal(signal.SIGINT)


def moved(before: tuple[int, int], after: tuple[int, int]) -> str:
    fast, mgmt = (b - a for a, b in zip(before, after, strict=True))
    return f"fast {fast / 2**20:.1f} MiB, management {mgmt / 2**20:.1f} MiB"


def runs(work: Path) -> set[Path]:
    return set((work / "runs").iterdir()) if (work / "runs").is_dir() else set()


def report(case: str, code: int, output: str, seconds: float, new_runs: set[Path]) -> None:
    """The night's exit, its cluster lines and verdict, and each entry's outcome from its own run.json."""
    print(f"{case}: exit {code} in {seconds:.0f} s", flush=True)
    for line in output.splitlines():
        if "cluster" in line or line.startswith(("nightly ", "release: ")):
            print(f"  {line[:300]}")
    found = [run / "run.json" for run in new_runs if (run / "run.json").is_file()]
    if len(found) != 1:
        print(f"  no run.json of this night: it stopped before its verdict (its output: {output.strip()[-300:]})")
        return
    for line in nccl_lines(found[0].parent):
        print(f"  nccl: {line}")
    for outcome in json.loads(found[0].read_text()).get("entries", []):
        numbers = outcome.get("numbers", {})
        print(f"  {outcome['entry']}: {outcome['status']} at {outcome['stage']}: {outcome['reason'][:400]}")
        print(f"    stage_s {numbers.get('stage_s')}")
        if "cluster" in numbers:  # its split, its hosts, how long they took to come up (the summary's line)
            print(f"    cluster {numbers['cluster']}, server boot_s {numbers.get('boot_s')}")
        for failure in outcome.get("failures", []):
            print(f"    failed: {failure.get('subject') or failure['what']}: {failure['reason'][:300]}")
        for cell, figure in sorted(numbers.get("cells", {}).items()):
            print(f"    {cell}: {figure.get('status')} {figure.get('value')} t/s")
        for prompt, evidence in sorted((numbers.get("drift_evidence") or {}).items()):
            print(f"    drift {prompt}: {evidence}")


def nccl_lines(run: Path) -> list[str]:
    """What NCCL said of its network and transports in the cluster entry's server log, each saying once."""
    said: dict[str, None] = {}
    for log in sorted((run / "logs" / CLUSTER_ENTRY).glob("*server.log")):
        for line in log.read_text(errors="replace").splitlines():
            if "NCCL INFO" in line and any(words in line for words in NCCL_LINES):
                said[line.split("NCCL INFO", 1)[1].strip()[:200]] = None
    return list(said)


def main(argv: list[str]) -> int:
    work = Path(argv[0]).resolve()
    cases = argv[1].split(",") if len(argv) > 1 and argv[1] else list(CASES)
    if unknown := sorted(set(cases) - set(CHOICES)):
        raise SystemExit(f"unknown cases {unknown}: choose from {', '.join(CHOICES)}")
    with two_hosts(work / "hosts") as hosts:
        env = os.environ | MULTICAST_OFF | {"SPARK_NIGHTLY_PATHS_CLUSTER": str(cluster_file(work, hosts))}
        print(f"two hosts: {HEAD_NAME} {hosts.fast_a}, {WORKER_NAME} {hosts.fast_b} on {FAST_IFACE}", flush=True)
        failed = 0
        for case in cases:
            try:
                run_case(work, hosts, env, case)
            except Exception as exc:  # one case's trouble is said, and the next case runs
                failed += 1
                print(f"{case}: broke: {type(exc).__name__}: {exc}", flush=True)
            print(f"  left running in the two hosts: {left_in(hosts) or 'nothing'}", flush=True)
    return 1 if failed else 0


def run_case(work: Path, hosts: TwoHosts, env: dict[str, str], case: str) -> None:
    log = work / f"two-hosts-{case}.log"
    only = ["--only", CLUSTER_ENTRY, "--no-publish"]
    before = runs(work)
    if case in ("pass", "cluster"):
        marks: dict[str, tuple[int, int]] = {}
        start = head_link_bytes(hosts)
        code, output, seconds = night(hosts, env, log, *(only if case == "cluster" else ()), marks=marks)
        report(case, code, output, seconds, runs(work) - before)
        print(f"  links over the night: {moved(start, head_link_bytes(hosts))}")
        if len(marks) == len(CLUSTER_MARKS):
            print(f"  links while the cluster ran: {moved(*(marks[mark] for mark in CLUSTER_MARKS))}")
    elif case == "bench":  # the cluster entry's cells by themselves, for tok/s against one GPU whatever its golden says
        code, seconds = command_on_head(hosts, env, log, "bench", CLUSTER_ENTRY, "--json", str(work / "bench-pp2.json"))
        print(f"bench: exit {code} in {seconds:.0f} s", flush=True)
        for line in log.read_text().splitlines():
            if "cluster" in line or line.startswith("|") or "ready in" in line:
                print(f"  {line[:300]}", flush=True)
    elif case == "solo-reference":
        solo_reference(work, hosts, env, log)
    elif case == "link-down":
        set_worker_fast_link(hosts, up=False)
        try:
            report(case, *night(hosts, env, log, *only), runs(work) - before)
        finally:
            set_worker_fast_link(hosts, up=True)
    else:
        action = "kill" if case == "kill" else "ctrl-c"
        report(case, *night(hosts, env, log, *only, on_ready=action), runs(work) - before)


def command_on_head(hosts: TwoHosts, env: dict[str, str], log: Path, *args: str) -> tuple[int, float]:
    """`spark-nightly ARGS` on spark-a, its output in `log`: its exit code and its time."""
    argv = [sys.executable, "-m", "pipeline", *args]
    started = time.monotonic()
    with log.open("w") as out:
        done = subprocess.run(hosts.on_head(argv), check=False, cwd=HERE, env=env, stdout=out, stderr=subprocess.STDOUT)
    return done.returncode, time.monotonic() - started


def solo_reference(work: Path, hosts: TwoHosts, env: dict[str, str], log: Path) -> None:
    """The cluster entry's golden against the solo entry's reference (copied under its name for this run only)."""
    found = sorted((work / "state" / "golden").glob(f"*/{SOLO_ENTRY}.json"))
    if not found:
        print("solo-reference: no reference of the solo entry (the pass case records it when the solo PASSes)")
        return
    borrowed = found[0].with_name(f"{CLUSTER_ENTRY}.json")
    verdicts = work / "solo-reference.json"
    borrowed.write_bytes(found[0].read_bytes())
    try:
        code, seconds = command_on_head(hosts, env, log, "golden", CLUSTER_ENTRY, "--json", str(verdicts))
    finally:
        borrowed.unlink()  # the cluster entry's own nights keep their own reference
    print(f"solo-reference: exit {code} in {seconds:.0f} s", flush=True)
    if not verdicts.is_file():
        print(f"  no verdicts (log {log})")
        return
    for verdict in json.loads(verdicts.read_text())["verdicts"]:
        if verdict["check"] in ("drift", "long decode") or verdict["status"] != "PASS":
            print(f"  {verdict['check']} {verdict['subject']}: {verdict['status']}: {verdict['reason'][:300]}")
            print(f"    {json.dumps(verdict['evidence'])[:700]}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
