"""report.html in a real browser: headless Chromium renders it, and the screenshot shows the charts."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from PIL import Image

from pipeline.config.bundle import ConfigPaths, load_config
from pipeline.infra import procs
from pipeline.infra.history import History, Sample
from pipeline.outcome import Outcome
from pipeline.stages.aftermath.report_html import CURRENT, LINE, REFERENCE, collect_series, render_html
from pipeline.status import Status
from tests.integration.conftest import CPU_ENTRY, ROOT

pytestmark = pytest.mark.integration

NIGHTS = ("2026-11-17", "2026-11-18", "2026-11-19", "2026-11-20", "2026-11-21")


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.fail("Chromium is needed for the report test: ./scripts/setup installs Debian's chromium package")
    return found


def _rgb(colour: str) -> tuple[int, int, int]:
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)


def _count(image: Image.Image, colour: str) -> int:
    wanted = _rgb(colour)
    data = image.convert("RGB").tobytes()
    pixels = (data[i : i + 3] for i in range(0, len(data), 3))
    return sum(1 for pixel in pixels if all(abs(a - b) <= 24 for a, b in zip(pixel, wanted, strict=True)))


def test_the_report_shows_the_matrix_and_a_trend_chart_per_cell_in_a_real_browser(tmp_path: Path) -> None:
    config = load_config(ConfigPaths(ROOT / "models.yaml", ROOT / "thresholds", ROOT / "golden"))
    history = History(tmp_path / "history.sqlite")
    samples = []
    for index, night in enumerate(NIGHTS):
        for cell, metric, value in (("tg32 (c1)", "tg_tps", 18.0 - index), ("pp128 (c1)", "pp_tps", 400.0 + 5 * index)):
            samples += [
                Sample(f"run-{night}", night, "cpu-x86", "host", CPU_ENTRY, cell, metric, value + d)
                for d in (-0.2, 0, 0.2)
            ]
    history.record(samples)
    series = collect_series(history, config, "cpu-x86", [CPU_ENTRY])
    charted = {(s.cell, s.metric): len(s.points) for s in series}
    assert charted[("tg32 (c1)", "tg_tps")] == 5 and charted[("pp128 (c1)", "pp_tps")] == 5
    run = {"run_id": "run-2026-11-21", "night": NIGHTS[-1], "profile": "cpu", "verdict": "FAIL", "publish": ""}
    outcome = Outcome(CPU_ENTRY, Status.FAIL, "perf", "tg32 (c1): tripped twice", True, 300.0)
    page = tmp_path / "report.html"
    page.write_text(render_html(run, [outcome], series))

    screenshot = tmp_path / "report.png"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run"]
    flags += ["--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"]
    flags += [f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1200,2400", f"--screenshot={screenshot}"]
    procs.run([_chromium(), *flags, page.as_uri()], tmp_path / "chromium.log", timeout_s=120)
    image = Image.open(screenshot)
    assert image.size == (1200, 2400)
    assert _count(image, LINE) > 500  # the series lines
    assert _count(image, REFERENCE) > 100  # the dashed references
    assert _count(image, CURRENT) > 50  # tonight's dots and the FAIL status
