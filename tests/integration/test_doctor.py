"""`spark-nightly doctor` on this machine: all green on the CPU profile once set up, each missing piece named with
its fix when it is taken away, and on the Spark profile (no GPU here) the night refused with what a runner needs."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from pipeline.cli import main
from pipeline.infra.cpu_class import cpu_class, cpu_flags
from tests.integration.conftest import CPU_ENTRY, CpuEngine, Place

pytestmark = pytest.mark.integration


def _doctor(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, str], str]:
    code = main(["doctor", *argv])
    out = capsys.readouterr().out
    print(out)
    rows = {
        m[2]: m[1] for line in out.splitlines() if (m := re.match(r"^(ok|MISSING|missing) +(\S+(?: \S+)*)  ", line))
    }
    return code, rows, out


def test_a_set_up_cpu_runner_is_all_green(
    place: Place, cpu_engine: CpuEngine, capsys: pytest.CaptureFixture[str]
) -> None:
    code, rows, out = _doctor(capsys, "--profile", "cpu")
    assert code == 0 and out.rstrip().endswith("doctor: ready for a night")
    assert rows["state directory"] == rows["disk"] == rows["candidate runtime"] == rows[f"weights {CPU_ENTRY}"] == "ok"
    assert "MISSING" not in out and "missing" not in out
    # the host's class and the kernel variant vLLM loads on it, whichever class this host is
    chosen = {"amx": "vllm._C", "avx512": "vllm._C", "avx2": "vllm._C_AVX2"}[cpu_class()]
    if chosen == "vllm._C" and "avx512_bf16" not in cpu_flags():
        chosen = "vllm._C_AVX512"
    (line,) = [line for line in out.splitlines() if line.startswith("ok        CPU  ")]
    assert f"  {cpu_class()} (x86_64 with AVX2" in line and f"{chosen} (vLLM loads it here)" in line


def test_each_piece_taken_away_is_named_with_its_fix(
    place: Place, cpu_engine: CpuEngine, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPARK_NIGHTLY_PATHS_CACHE", str(place.root / "empty-cache"))  # no runtime, no weights
    code, rows, out = _doctor(capsys, "--profile", "cpu")
    assert code == 0  # the night installs them itself; doctor says so
    assert rows["candidate runtime"] == rows[f"weights {CPU_ENTRY}"] == "missing"
    assert "fix: ./scripts/nightly installs it" in out and f"fix: spark-nightly engine check {CPU_ENTRY}" in out

    blocker = place.root / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("SPARK_NIGHTLY_PATHS_STATE", str(blocker / "state"))  # under a file: never writable
    monkeypatch.setenv("SPARK_NIGHTLY_PUBLISH_TARGET", "github")
    monkeypatch.setenv("SPARK_NIGHTLY_PUBLISH_REPO", "owner/wheels")
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    code, rows, out = _doctor(capsys, "--profile", "cpu")
    assert code == 1 and rows["state directory"] == "MISSING"
    assert "fix: make it writable by the runner's user" in out
    assert rows["GitHub owner/wheels"] == "missing" and "$GITHUB_TOKEN is not set here" in out
    assert out.rstrip().endswith("doctor: the night cannot run: state directory")


def test_a_runners_cluster_is_named_and_its_other_node_reached_as_the_launch_does(
    place: Place, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(
        "version: 1\nprofile: spark\nssh_config: ssh_config\nnodes:\n"
        "  - {name: gx10-a, interconnect: {interface: enp1s0f1np1, address: 192.168.177.11}}\n"
        "  - {name: gx10-b, interconnect: {interface: enp1s0f1np1, address: 192.168.177.12}}\n"
    )
    (tmp_path / "ssh_config").write_text("Host gx10-b\n  HostName 127.0.0.1\n  Port 9\n")  # nothing answers
    monkeypatch.setenv("SPARK_NIGHTLY_PATHS_CLUSTER", str(cluster))
    code, rows, out = _doctor(capsys, "--profile", "spark")
    assert code == 1 and rows["cluster"] == "ok" and rows["ssh gx10-b"] == "MISSING"
    assert "gx10-a (enp1s0f1np1 192.168.177.11), gx10-b (enp1s0f1np1 192.168.177.12)" in out


def test_the_spark_profile_on_a_host_without_its_gpu_names_what_a_runner_needs(
    place: Place, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))  # a stock Spark: no nvcc, no ccache, no docker here
    monkeypatch.delenv("CUDA_HOME", raising=False)
    code, rows, out = _doctor(capsys, "--profile", "spark")
    assert code == 1
    assert rows["GPU"] == rows["nvcc"] == rows["ccache"] == rows["docker + NVIDIA runtime"] == "MISSING"
    # no cluster.yaml on this runner: the cluster entry is named as skipped, never blocking
    assert rows["cluster"] == "missing" and "qwen3-235b-a22b-gptq-int4-tp2 skipped" in out
    assert "fix: install the NVIDIA driver" in out and "fix: sudo apt-get install ccache" in out
    # as root the page cache can be dropped; each Hub model not yet downloaded is named, not blocking
    assert rows["drop the page cache"] == ("ok" if os.geteuid() == 0 else "MISSING")
    assert rows["weights gpt-oss-120b"] == "missing"
    assert "hf download openai/gpt-oss-120b --revision b5c939de8f754692c1647ca79fbf85e8c1e70f8a" in out
