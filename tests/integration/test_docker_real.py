"""A published night becomes a runtime image in one step, and the CPU entry served from it with
`launch.target: docker` passes golden and perf: the Docker path for real, no registry asked.

It needs a container engine (`./scripts/container-engine` makes one where none answers, and the base image) and
about four minutes: ./scripts/test makes the engine during its parallel phase and runs this in its serial phase
(it times its night);
`./scripts/test-containers` runs it alone.
"""

from __future__ import annotations

import json
import os

import pytest

from pipeline.cli import main
from tests.integration.conftest import CPU_ENTRY, ROOT, CpuEngine, Place, bench_one_case, golden_for_another_stage

pytestmark = [pytest.mark.integration, pytest.mark.quiet_host, pytest.mark.container]

ENGINE = ROOT / ".venv" / "containers" / "bin"


def test_a_fetched_night_builds_an_image_whose_container_passes_golden_and_perf(
    place: Place, cpu_engine: CpuEngine, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    if not (ENGINE / "docker").exists():
        pytest.fail("no container engine: run ./scripts/container-engine first (./scripts/test does)")
    monkeypatch.setenv("PATH", f"{ENGINE}{os.pathsep}{os.environ['PATH']}")
    bench_one_case(place)
    # the container's golden stage still asks every prompt, determinism and the JSON-schema answer; the long decode
    # and the tool calls (a third of a golden run on the CPU engine) prove nothing about a container that the served
    # tests (served/test_golden_real.py) do not prove in full
    golden_for_another_stage(place)
    assert main(["nightly", "--profile", "cpu"]) == 0  # a published night, as users find it
    capsys.readouterr()

    assert main(["image", "--night", "latest", "--dest", str(place.root / "nightly")]) == 0
    built = capsys.readouterr().out
    tag = built.split()[1]
    assert tag.startswith("spark-nightly/runtime:"), built
    context = next((place.root / "nightly").glob("*-image"))
    dockerfile = (context / "Dockerfile").read_text()
    assert "FROM spark-nightly/base:bookworm" in dockerfile and "--require-hashes --no-index" in dockerfile

    with place.cpu_entry() as entry:
        entry["launch"] |= {"target": "docker", "image": tag}
    assert main(["nightly", "--profile", "cpu"]) == 0
    run = place.last_run()
    (outcome,) = run["entries"]  # type: ignore[misc]
    assert (outcome["status"], outcome["stage"]) == ("PASS", "perf"), outcome["reason"]
    log = next((place.runs / str(run["run_id"]) / "logs" / CPU_ENTRY).glob("*-server.log")).read_text()
    assert log.startswith("$ docker run") and f" {tag} python3 -m vllm.entrypoints.openai.api_server" in log
    assert "--host 127.0.0.1" in log and "0.0.0.0" not in log
    print(json.dumps({"image": tag, "reason": outcome["reason"]}, indent=1))
