"""One server at a time: boot pairs judged with the night's own boot spread, measured in turns, every boot new."""

from __future__ import annotations

import math
import random
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from pipeline.cli import main
from pipeline.config.thresholds import PairRules
from pipeline.detect.boots import BootPair, boot_spread, confirm_boots
from pipeline.errors import EngineError, HostUnhealthy
from pipeline.infra.confirmed import BuildRef
from pipeline.infra.openai_client import Generation, Scored
from pipeline.stages.prove import judge, pairs, turns
from pipeline.stages.prove.boot import Restartable
from pipeline.stages.prove.paired_verdict import InTurn
from pipeline.stages.prove.perf_judge import judge_results
from pipeline.status import Status
from tests.unit.test_perf_judge import HEALTHY, _build, _case, _ctx, _judge, _seed, _thresholds, runs_by_client

SPARK_RULES = PairRules(min_effect=0.03, boot_sd=0.028)  # thresholds/spark-gb10: the prior of every Spark file


def _pair(rng: random.Random, effect: float, *, a_boot: float = 0.0, b_boot: float = 0.0, runs: int = 3) -> BootPair:
    def boot(offset: float) -> tuple[float, ...]:
        return tuple(100.0 * math.exp(offset + rng.gauss(0.0, 0.01)) for _ in range(runs))

    return BootPair(boot(a_boot), boot(math.log1p(effect) + b_boot))


def test_boot_pairs_fail_a_clear_slowdown_and_pass_an_unchanged_build() -> None:
    rng = random.Random(7)
    slower = confirm_boots([_pair(rng, -0.08) for _ in range(5)], min_effect=0.03, prior_boot_sd=0.028)
    assert slower.decision == "FAIL" and slower.pairs == 5 and slower.mean_ratio == pytest.approx(0.92, abs=0.01)
    assert "5 boot pairs (3 runs a boot)" in slower.reason and "pooled with the hardware's 2.8%" in slower.reason
    same = confirm_boots([_pair(rng, 0.0) for _ in range(8)], min_effect=0.03, prior_boot_sd=0.028)
    assert same.decision == "PASS", same.reason


def test_boot_pairs_that_agree_by_chance_cannot_outweigh_the_hardwares_boot_spread() -> None:
    """Bimodal boots: every A boot fast and every B boot 4 % slow, four times running (p = 0.21 ** 4). The runs
    agree tightly, so without the shipped spread as a prior (or with an unmeasured one, floored at 1 %) the pairs
    would call it significant; the prior keeps it undecided."""
    rng = random.Random(3)
    unlucky = [_pair(rng, 0.0, b_boot=math.log(0.96)) for _ in range(4)]
    assert confirm_boots(unlucky, min_effect=0.03, prior_boot_sd=0.028).decision == "INCONCLUSIVE"
    assert confirm_boots(unlucky, min_effect=0.03, prior_boot_sd=0.028, prior_df=0.0).decision == "FAIL"
    assert confirm_boots(unlucky, min_effect=0.03, prior_boot_sd=0.0).decision == "FAIL"


def test_the_nights_boot_spread_is_what_the_boot_pairs_show_beyond_their_runs() -> None:
    rng = random.Random(11)
    spread = [_pair(rng, 0.0, a_boot=rng.gauss(0, 0.03), b_boot=rng.gauss(0, 0.03), runs=5) for _ in range(40)]
    assert boot_spread(spread) == pytest.approx(0.03 * math.sqrt(2), rel=0.3)  # B/A's SD: two boots' offsets
    assert boot_spread([_pair(rng, 0.0, runs=5) for _ in range(40)]) < 0.005
    assert math.isnan(boot_spread(spread[:1]))
    with pytest.raises(ValueError, match="positive, finite"):
        confirm_boots([BootPair((1.0,), (math.nan,))])


def test_boot_pairs_are_asked_three_then_one_more_at_a_time_until_they_decide(tmp_path: Path) -> None:
    _seed(_ctx(tmp_path), tmp_path, 20.0)
    rng = random.Random(5)
    made = [_pair(rng, -0.10) for _ in range(8)]
    asked: list[int] = []

    def measure(result: Any, metric: str, wanted: int, a: BuildRef) -> list[BootPair]:
        asked.append(wanted)
        return made[:wanted]

    outcomes = judge_results(
        [_case(17.0)],
        _thresholds(SPARK_RULES),
        _ctx(tmp_path, "2026-11-20"),
        health_before=HEALTHY,
        health_after=HEALTHY,
        remeasure=lambda r: _case(17.0),
        paired=InTurn(measure),
    )
    decode = next(o for o in outcomes if o.cell == "tg32")
    assert decode.status == Status.FAIL and decode.in_turn and decode.pairs_measured == asked[-1]
    assert asked == list(range(3, asked[-1] + 1)) and asked[-1] < 8  # stopped as soon as it was clear
    assert "booted in turns with the last confirmed build (runtime runtime-2026-11-01" in decode.reason
    assert decode.last_good is not None and decode.last_good.id == "runtime-2026-11-01"


def test_boot_pairs_that_never_decide_stop_at_the_most_a_cell_is_given(tmp_path: Path) -> None:
    _seed(_ctx(tmp_path), tmp_path, 20.0)
    asked: list[int] = []
    spread = [0.04, -0.04, 0.0, -0.06, 0.05, -0.05, 0.01, -0.03]

    def measure(result: Any, metric: str, wanted: int, a: BuildRef) -> list[BootPair]:
        asked.append(wanted)
        return [BootPair((20.0,) * 3, (20.0 * (1 + d) * 0.98,) * 3) for d in spread[:wanted]]

    decode = next(
        o
        for o in _judge(_case(17.0), _ctx(tmp_path), remeasure=lambda r: _case(17.0), paired=InTurn(measure))  # type: ignore[arg-type]
        if o.cell == "tg32"
    )
    assert asked == [3, 4, 5, 6, 7, 8] and decode.status == Status.INCONCLUSIVE and decode.pairs_measured == 8


def test_a_last_confirmed_build_that_cannot_boot_in_its_turn_leaves_the_cell_unpaired(tmp_path: Path) -> None:
    _seed(_ctx(tmp_path), tmp_path, 20.0)
    decode = next(
        o
        for o in _judge(_case(17.0), _ctx(tmp_path), remeasure=lambda r: _case(17.0), paired=InTurn(lambda *a: None))  # type: ignore[arg-type]
        if o.cell == "tg32"
    )
    assert decode.status == Status.INCONCLUSIVE and decode.confirmation is None
    assert "could not be served" in decode.reason


class FakeTurns:
    """The serving side of boots in turn, recording each boot: A's turns and tonight's new boots."""

    def __init__(self, fail_a_at: int | None = None) -> None:
        self.events: list[str] = []
        self.fail_a_at = fail_a_at
        self.entry = type("Entry", (), {"id": "m"})()

    def fresh_tonight(self, why: str) -> str:
        self.events.append("B")
        return "B"

    @contextmanager
    def turn(self, build: BuildRef, why: str) -> Iterator[str]:
        if self.fail_a_at is not None and self.events.count("A") + 1 == self.fail_a_at:
            raise EngineError("no room for two")
        self.events.append("A")
        yield "A"

    def cost(self) -> str:
        return f"{len(self.events)} boots"


def test_boots_in_turn_alternate_a_b_then_b_a_each_boot_new_with_warm_ups_per_boot(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    served = runs_by_client(monkeypatch)
    windows: list[str] = []

    @contextmanager
    def watch() -> Iterator[None]:
        windows.append("window")
        yield

    fake = FakeTurns()
    measure = pairs.boots_in_turn(fake, "m", watch=watch, say=lambda line: None).measure  # type: ignore[arg-type]
    three = measure(_case(18.0), "tg_tps", 3, _build("a"))
    assert fake.events == ["A", "B", "B", "A", "A", "B"]  # A B, B A, A B: every B half a boot of its own
    per_boot = pairs.WARMUP_RUNS + pairs.RUNS_PER_BOOT
    assert served == [side for side in fake.events for _ in range(per_boot)] and len(windows) == 6
    assert three is not None and all(p.difference() == pytest.approx(math.log(0.5)) for p in three)
    assert all(len(p.a) == len(p.b) == pairs.RUNS_PER_BOOT for p in three)
    assert measure(_case(18.0), "pp_tps", 3, _build("a")) is not None and len(fake.events) == 6  # the other cell
    four = measure(_case(18.0), "tg_tps", 4, _build("a"))
    assert fake.events[6:] == ["B", "A"] and four is not None and four[:3] == three
    failing = FakeTurns(fail_a_at=2)
    assert (
        pairs.boots_in_turn(failing, "m", watch=watch, say=lambda line: None).measure(  # type: ignore[arg-type]
            _case(18.0), "tg_tps", 3, _build("a")
        )
        is None
    )


class FakeServer:
    def __init__(self, name: str) -> None:
        self.client = name
        self.boot_s = 1.0


def _restartable(started: list[str]) -> Restartable:
    @contextmanager
    def start(boots: int) -> Iterator[Any]:
        started.append(f"tonight-{boots}")
        yield FakeServer(f"tonight-{boots}")
        started.append(f"stopped tonight-{boots}")

    return Restartable(start)


def test_turns_stop_tonights_server_before_another_build_boots_and_bring_it_back_on_demand(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    started: list[str] = []

    @contextmanager
    def fake_boot(entry: Any, candidate: Any, *, cache_dir: Path, log_dir: Path, say: Any) -> Iterator[Any]:
        started.append(f"A in {log_dir.relative_to(tmp_path)}")
        yield FakeServer("A")
        started.append("stopped A")

    monkeypatch.setattr(turns, "boot", fake_boot)
    monkeypatch.setattr(turns, "candidate_of", lambda build, profile: object())
    entry = type("Entry", (), {"id": "m"})()
    serving = _restartable(started)
    rooms: list[str] = []

    def room() -> str | None:
        rooms.append("room")
        return None

    held = turns.Turns(entry, object(), serving, tmp_path, tmp_path / "logs", lambda line: None, room)  # type: ignore[arg-type]
    with held.turn(_build("a"), "the golden judge") as client:
        assert client == "A" and not serving.up
    assert held.tonight == "tonight-1"
    assert started == ["tonight-0", "stopped tonight-0", "A in logs/turns/boot-1", "stopped A", "tonight-1"]
    assert held.fresh_tonight("boot pair 1") == "tonight-2" and started[-2:] == ["stopped tonight-1", "tonight-2"]
    assert [b.build for b in held.boots] == ["runtime-a", "tonight", "tonight"] and rooms == ["room"] * 3
    assert held.cost().startswith("3 boots in turn, ")

    refused = turns.Turns(entry, object(), _restartable([]), tmp_path, tmp_path, lambda line: None, lambda: "full")  # type: ignore[arg-type]
    with pytest.raises(HostUnhealthy, match=r"no room to boot the build .*: full"), refused.turn(_build("a"), "x"):
        pass


def test_a_spark_dry_run_of_a_tripped_cell_shows_the_boots_in_turn_each_with_names_of_its_own(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["bench", "gpt-oss-120b", "--profile", "spark", "--dry-run"]) == 0
    out = capsys.readouterr().out
    headings = re.findall(r"^## boot (\d+): ([AB]), (.*?);", out, flags=re.MULTILINE)
    assert [side for _, side, _ in headings] == ["B", *"ABBAABBAABBAABBA"]  # B0, then A B / B A ... 8 pairs
    assert headings[0][2] == "tonight's bench and rerun" and "only if the pairs before" in headings[7][2]
    names = re.findall(r"docker run --rm --name (\S+)", out)
    removed = re.findall(r"# on exit: docker rm --force (\S+)", out)
    assert len(names) == len(set(names)) == 17 and removed == names  # each clean-up removes only its own boot
    images = re.findall(r" (spark-nightly/runtime:\S+) vllm serve", out)
    assert images == ["spark-nightly/runtime:tonight" if s == "B" else "spark-nightly/runtime:last-confirmed"
                      for _, s, _ in headings]  # fmt: skip
    assert "1 server at a time" in out and "drop the page cache" in out and "7 to 17 boots" in out


def test_the_golden_judge_in_turns_scores_in_a_boot_of_its_own_and_says_why_when_it_cannot_boot(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scored_on: list[str] = []
    monkeypatch.setattr(judge, "rescore", lambda client, model, g: scored_on.append(client) or Scored((-0.1,), (-0.1,)))
    answer = Generation("p1", "4", ("4",), (-0.1,), token_ids=(7,), prompt_token_ids=(1, 2))
    fake = FakeTurns()
    on_turn = judge.TurnJudge(fake, _build("a"), "m", "the last confirmed build a", 0.1, 0.5)  # type: ignore[arg-type]
    assert judge.score_or_why(on_turn, [answer]) == {"p1": Scored((-0.1,), (-0.1,))}
    assert scored_on == ["A"] and fake.events == ["A"]  # scored by A, in A's own turn
    refused = judge.TurnJudge(FakeTurns(fail_a_at=1), _build("a"), "m", "the build a", 0.1, 0.5)  # type: ignore[arg-type]
    assert judge.score_or_why(refused, [answer]) == "the build a could not be served: no room for two"


def test_a_build_that_did_not_boot_in_its_turn_is_recorded_and_not_booted_again_that_night(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    attempts: list[str] = []

    @contextmanager
    def failing_boot(entry: Any, candidate: Any, *, cache_dir: Path, log_dir: Path, say: Any) -> Iterator[Any]:
        attempts.append(str(log_dir.relative_to(tmp_path)))
        raise EngineError("out of memory while loading")
        yield  # pragma: no cover

    monkeypatch.setattr(turns, "boot", failing_boot)
    monkeypatch.setattr(turns, "candidate_of", lambda build, profile: object())
    started: list[str] = []
    serving = _restartable(started)
    entry = type("Entry", (), {"id": "m"})()
    held = turns.Turns(entry, object(), serving, tmp_path, tmp_path, lambda line: None, lambda: None)  # type: ignore[arg-type]
    with pytest.raises(EngineError, match="out of memory"), held.turn(_build("a"), "boot pair 1"):
        pass
    assert [b.why for b in held.boots] == ["boot pair 1, did not boot"] and attempts == ["turns/boot-1"]
    assert held.tonight == "tonight-1"  # back for the next cell
    with pytest.raises(EngineError, match="did not boot earlier tonight: out of memory"), held.turn(_build("a"), "x"):
        pass
    assert attempts == ["turns/boot-1"] and serving.up  # no second boot, and tonight's server was left serving


def test_a_judge_that_fails_while_scoring_leaves_the_answers_unjudged_instead_of_blaming_tonight(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(client: object, model: str, g: Generation) -> Scored:
        raise EngineError("A's server went away")

    monkeypatch.setattr(judge, "rescore", broken)
    answer = Generation("p1", "4", ("4",), (-0.1,), token_ids=(7,), prompt_token_ids=(1, 2))
    on_turn = judge.TurnJudge(FakeTurns(), _build("a"), "m", "the build a", 0.1, 0.5)  # type: ignore[arg-type]
    assert judge.score_or_why(on_turn, [answer]) == "the build a could not be served: A's server went away"
