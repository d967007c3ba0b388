"""`spark-nightly site` over a store of several published nights, opened in a real headless Chromium: the page loads
with no console message, the nights, the grid and a trend chart per cell are drawn (the screenshot shows them)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from pipeline.cli import main
from pipeline.infra import procs
from pipeline.infra.releases import LocalReleaseStore
from pipeline.stages.release.publish import Night, build_manifest, publish_night
from pipeline.stages.release.site import A_BUILD, BAND, LINE
from tests.integration.test_report_browser import _chromium, _count
from tests.published import night_files

pytestmark = pytest.mark.integration

NIGHTS = ("2026-11-20", "2026-11-21", "2026-11-22", "2026-11-23", "2026-11-24")
ENTRY = "smollm2-135m-instruct"


def _entries(index: int, night: str) -> list[dict[str, Any]]:
    tg = {"status": "PASS", "value": 18.0 + 0.3 * (index % 2), "ref": 18.2}
    if index == len(NIGHTS) - 1:  # the last night was paired against the build of the second
        tg |= {"b_over_a": 0.992, "pairs": 6, "last_good": "runtime-ab12", "a_night": NIGHTS[1]}
    cells = {"tg32 (c1)": tg, "pp128 (c1)": {"status": "PASS", "value": 400.0 + 4 * index, "ref": 404.0}}
    optional = {"id": "optional-model", "status": "XFAIL" if index == 2 else "PASS", "reason": "known break"}
    return [{"id": ENTRY, "status": "PASS", "numbers": {"cells": cells}}, optional]


def _publish_nights(store: LocalReleaseStore, tmp_path: Path, nights: tuple[str, ...] = NIGHTS) -> None:
    for index, night in enumerate(nights):
        _, files = night_files(tmp_path / night, night, ["vllm-0.33.0-py3-none-any.whl"], run_id=f"run-{index}")
        wheels, lock = files[:-1], files[-1]
        manifest = build_manifest(
            night=night,
            run_id=f"run-{index}",
            profile="cpu",
            wheels=wheels,
            lock=lock,
            plan={"sources": [{"name": "vllm", "commit": f"{index}" * 40, "main_commit": f"{index}" * 40}]},
            host={"hostname": "test-host"},
            health=None,
            entries=_entries(index, night),
        )
        publish_night(store, Night(night, f"run-{index}", True, manifest), files)


def test_the_site_of_several_nights_draws_the_grid_and_the_trends_in_a_real_browser(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    store = LocalReleaseStore(tmp_path / "store")
    _publish_nights(store, tmp_path / "nights")
    monkeypatch.setenv("SPARK_NIGHTLY_PUBLISH_LOCAL_DIR", str(tmp_path / "store"))
    site = tmp_path / "site"
    assert main(["site", "--out", str(site)]) == 0
    assert f"site: {len(NIGHTS)} published nights" in capsys.readouterr().out
    page = site / "index.html"
    evidence = json.loads((site / "nights" / "nightly-20261124" / "manifest.json").read_text())
    assert evidence["run_id"] == "run-4"

    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run"]
    flags += ["--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"]
    flags += [f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0"]
    log = tmp_path / "chromium-dom.log"
    procs.run([_chromium(), *flags, "--dump-dom", page.as_uri()], log, timeout_s=120)
    dom = log.read_text()
    assert not re.search(r"CONSOLE|Uncaught|Failed to load resource", dom), "the page logged to the console"
    assert dom.count("<tr>") >= len(NIGHTS) + 3  # the nights and the grid's rows
    grid = dom[dom.index('id="grid"') :]
    assert grid.count(">XFAIL<") == 1 and grid.count(">PASS<") == 2 * len(NIGHTS) - 1
    assert dom.count("<svg") == 2 and "A: the build of 2026-11-21" in dom  # a chart per cell; A marked

    screenshot = tmp_path / "site.png"
    shot = [*flags, "--window-size=1200,1600", f"--screenshot={screenshot}", page.as_uri()]
    procs.run([_chromium(), *shot], tmp_path / "chromium-shot.log", timeout_s=120)
    image = Image.open(screenshot)
    assert _count(image, LINE) > 300 and _count(image, BAND) > 1000 and _count(image, A_BUILD) > 20


def test_a_store_of_one_night_draws_its_point_on_every_chart_and_counts_it_as_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A newcomer's finding: with one published night the charts drew the band and no point, and the page said
    "1 nights"."""
    store = LocalReleaseStore(tmp_path / "store")
    _publish_nights(store, tmp_path / "nights", NIGHTS[:1])
    monkeypatch.setenv("SPARK_NIGHTLY_PUBLISH_LOCAL_DIR", str(tmp_path / "store"))
    site = tmp_path / "site"
    assert main(["site", "--out", str(site)]) == 0
    assert "site: 1 published night," in capsys.readouterr().out
    page = site / "index.html"
    text = page.read_text()
    assert "1 night, newest first" in text and "1 nights" not in text
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run"]
    flags += ["--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"]
    flags += [f"--user-data-dir={tmp_path / 'profile'}"]
    screenshot = tmp_path / "site.png"
    shot = [*flags, "--window-size=1200,1600", f"--screenshot={screenshot}", page.as_uri()]
    procs.run([_chromium(), *shot], tmp_path / "chromium-shot.log", timeout_s=120)
    image = Image.open(screenshot)
    assert text.count("<svg") == 2
    assert _count(image, LINE) > 2 * 60  # two charts, a point of radius 5 on each (about 78 pixels a point)
