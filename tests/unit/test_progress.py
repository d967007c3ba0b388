"""Progress: a live status line on a real pseudo-terminal, folded groups on Actions, plain lines elsewhere."""

from __future__ import annotations

import io
import os
import pty
import re
import select
import time
from pathlib import Path

import pytest

from pipeline.progress import Progress, clock_text, detect_mode
from pipeline.stages.aftermath.durations import Durations


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_clock_text_reads_like_a_stopwatch() -> None:
    assert [clock_text(s) for s in (0, 42.4, 187, 3723)] == ["0s", "42s", "3:07", "1:02:03"]


def test_on_actions_each_step_is_a_folded_group_with_its_lines_inside(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    out, clock = io.StringIO(), FakeClock()
    progress = Progress(out, clock=clock, stamp=lambda: "02:00:00")
    assert progress.mode == "actions"
    with progress.step("[1/2] smollm2-135m-instruct", expected_s=120):
        progress.stage("boot")
        clock.now += 65
    assert out.getvalue() == (
        "::group::[1/2] smollm2-135m-instruct\n"
        "[02:00:00] [1/2] smollm2-135m-instruct: boot\n"
        "::endgroup::\n"
        "[02:00:00] [1/2] smollm2-135m-instruct: 1:05\n"
    )


def test_plain_logs_say_when_a_step_starts_with_last_nights_duration_and_when_it_ends() -> None:
    out, clock = io.StringIO(), FakeClock()
    progress = Progress(out, mode="plain", clock=clock, stamp=lambda: "t")
    with progress.step("candidate", expected_s=30):
        clock.now += 12
    assert out.getvalue() == "[t] candidate: started (last time 30s)\n[t] candidate: done in 12s\n"


def test_the_status_line_shows_step_stage_elapsed_and_eta_then_says_when_it_overruns() -> None:
    clock = FakeClock()
    progress = Progress(io.StringIO(), mode="plain", clock=clock)
    with progress.step("[2/6] qwen3-30b", expected_s=120):
        progress.stage("golden")
        clock.now += 65
        assert progress.status_line() == "[2/6] qwen3-30b · golden · elapsed 1:05 · ETA 55s"
        clock.now += 100
        assert progress.status_line() == "[2/6] qwen3-30b · golden · elapsed 2:45 · over last night's 2:00"
    with progress.step("first night"):
        assert progress.status_line() == "first night · elapsed 0s"  # no record, no ETA invented


REDRAW = "\r\x1b[K[1/1] smollm2-135m-instruct · perf · elapsed"


def test_on_a_real_pseudo_terminal_the_status_line_is_redrawn_live_and_cleared_for_log_lines() -> None:
    leader, follower = pty.openpty()
    terminal = os.fdopen(follower, "w")
    try:
        assert detect_mode(terminal) == "tty"
        progress = Progress(terminal, tick_s=0.05, stamp=lambda: "t")
        shown = ""
        with progress.step("[1/1] smollm2-135m-instruct", expected_s=3600):
            progress.stage("perf")
            deadline = time.monotonic() + 30  # a loaded host schedules the ticker late, never not at all
            while shown.count(REDRAW) < 3 and time.monotonic() < deadline:
                if select.select([leader], [], [], 0.1)[0]:  # a few ticks of the ticker thread, as they come
                    shown += os.read(leader, 65536).decode()
            progress.say("pp128: 412 t/s")
        terminal.flush()
        while "done in" not in shown and select.select([leader], [], [], 10)[0]:  # drain up to the closing line
            shown += os.read(leader, 65536).decode()
    finally:
        terminal.close()
        os.close(leader)
    assert shown.count(REDRAW) >= 3, shown
    assert "elapsed 0s · ETA 1:00:00" in shown
    assert "\r\x1b[K[t] pp128: 412 t/s" in shown  # the status line is cleared before a log line
    assert re.search(r"\[t\] \[1/1\] smollm2-135m-instruct: done in \d+s$", shown.rstrip()), shown  # 0s unless loaded


def test_durations_remember_last_nights_steps_and_survive_a_torn_file(tmp_path: Path) -> None:
    path = tmp_path / "durations.json"
    durations = Durations(path)
    assert durations.expected("a") is None and durations.expected_total(["a"]) == 0
    durations.record("a", 61.04)
    durations.record("b", 30)
    again = Durations(path)
    assert again.expected("a") == 61.0 and again.expected_total(["a", "b", "c"]) == 91.0
    path.write_text('{"seconds": {"a": 1')
    assert Durations(path).expected("a") is None
