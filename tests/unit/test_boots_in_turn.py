"""One server at a time: boot pairs judged with the night's own boot spread, measured in turns, every boot new."""

from __future__ import annotations

import math
import random
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from pipeline.cli import main
from pipeline.config.matrix import BootBudget, ModelEntry
from pipeline.config.thresholds import MIN_BOOT_PAIRS, OWN_SPREAD_DF, PRIOR_DF, PairRules
from pipeline.detect.boots import BootPair, pooled_spread
from pipeline.detect.evidence import Carried, SpreadSoFar
from pipeline.detect.sequential import FAIL_AT, PASS_AT, decide_sequential
from pipeline.errors import EngineError, HostUnhealthy
from pipeline.infra.confirmed import BuildRef
from pipeline.infra.openai_client import Generation, Scored
from pipeline.outcome import Outcome
from pipeline.stages.aftermath.trial_bench import Failing, step_verdict
from pipeline.stages.prove import judge
from pipeline.stages.prove.boot import Restartable
from pipeline.stages.prove.perf import pairs, turns
from pipeline.stages.prove.perf import run as perf_run
from pipeline.stages.prove.perf.judge import judge_results
from pipeline.stages.prove.perf.measure import RunSample
from pipeline.stages.prove.perf.pair_book import ABoot, PairBook
from pipeline.stages.prove.perf.paired import CellOutcome, InTurn
from pipeline.stages.prove.perf.run import JudgedPerf
from pipeline.stages.prove.perf.verdict import cell_numbers, headline, perf_verdict
from pipeline.status import Status
from tests.unit.test_perf_judge import (
    HEALTHY,
    _a_of,
    _build,
    _case,
    _ctx,
    _judge,
    _seed,
    _thresholds,
    runs_by_client,
)

SPARK_RULES = PairRules(min_effect=0.03, boot_sd=0.028)  # thresholds/spark-gb10: the prior of every Spark file


def _pair(rng: random.Random, effect: float, *, a_boot: float = 0.0, b_boot: float = 0.0, runs: int = 3) -> BootPair:
    def boot(offset: float) -> tuple[float, ...]:
        return tuple(100.0 * math.exp(offset + rng.gauss(0.0, 0.01)) for _ in range(runs))

    return BootPair(boot(a_boot), boot(math.log1p(effect) + b_boot))


def _differences(rng: random.Random, effect: float, n: int, spread: float = 0.02) -> list[float]:
    return [math.log1p(effect) + rng.gauss(0.0, spread * math.sqrt(2)) for _ in range(n)]


def _decide(differences: list[float], carried: Carried | None = None, *, more: bool = False, **kw: Any) -> Any:
    variance = 0.028**2
    return decide_sequential(
        differences, carried, a="a", night="2026-11-20", shift=SPARK_RULES.shift(), variance=variance, spread=0.028,
        more=more, **kw,
    )  # fmt: skip


def test_the_sequential_test_fails_a_clear_slowdown_and_passes_an_unchanged_build() -> None:
    rng = random.Random(7)
    slower = _decide(_differences(rng, -0.08, 4))
    assert slower.decision == "FAIL" and slower.llr >= FAIL_AT and slower.carry is None
    assert "B/A 0.9" in slower.reason and "FAIL at" in slower.reason and "boot-to-boot SD of B/A 2.8%" in slower.reason
    same = _decide(_differences(rng, 0.0, 6))
    assert same.decision == "PASS" and same.llr <= PASS_AT, same.reason


def test_an_undecided_night_carries_its_pairs_to_the_next_night_against_the_same_build() -> None:
    """A build about 5 % slower: one night's two boot pairs lean towards it without deciding; the next night's two,
    added to them, FAIL it, where alone they could not. Against another A the carried pairs are not used."""
    first = _decide([-0.045, -0.040])
    assert first.decision == "INCONCLUSIVE" and first.carry == Carried("a", (-0.045, -0.040), ("2026-11-20",))
    assert "carried to the next night" in first.reason
    alone = _decide([-0.065, -0.065])
    assert alone.decision == "INCONCLUSIVE"
    together = _decide([-0.065, -0.065], first.carry)
    assert together.decision == "FAIL" and together.carried_pairs == 2
    assert "2 boot pairs tonight and 2 carried from 2026-11-20" in together.reason
    other = decide_sequential(
        [-0.065, -0.065], first.carry, a="b", night="n", shift=SPARK_RULES.shift(), variance=0.028**2, spread=0.028,
        more=False,
    )  # fmt: skip
    assert other.carried_pairs == 0 and other.decision == "INCONCLUSIVE"


def test_a_night_out_of_budget_that_leans_to_no_slowdown_clears_unless_a_regression_is_open() -> None:
    leaning = _decide([0.004, -0.006])
    assert leaning.decision == "PASS" and leaning.carry is None and "cleared, not confirmed" in leaning.reason
    assert _decide([0.004, -0.006], more=True).decision == "INCONCLUSIVE"  # pairs left: it measures more
    open_regression = _decide([0.004, -0.006], clearable=False)
    assert open_regression.decision == "INCONCLUSIVE" and open_regression.carry is None


def _nights_of(rng: random.Random, boot_sd: float, nights: int) -> SpreadSoFar:
    """A host's past boot pairs: `nights` nights of three, every boot with an offset of SD `boot_sd`."""
    learned = SpreadSoFar()
    for _ in range(nights):
        night = [_pair(rng, 0.0, a_boot=rng.gauss(0, boot_sd), b_boot=rng.gauss(0, boot_sd)) for _ in range(3)]
        learned = learned.plus([pair.difference() for pair in night])
    return learned


def test_the_boot_spread_is_pooled_from_the_prior_the_hosts_nights_and_tonight() -> None:
    """A host whose boots spread 3 % (B/A's SD 4.2 %) against a file that says 2.8 %: the prior alone says 2.8 %;
    twenty nights of three boot pairs teach the host's own, and the source says where it came from."""
    rng = random.Random(11)
    prior = pooled_spread(0.028, SpreadSoFar(), [])
    assert prior.spread == pytest.approx(0.028) and prior.source == "the file's 2.8% worth 8 pairs"
    learned = _nights_of(rng, 0.03, 20)
    assert (learned.df, learned.nights) == (40, 20)
    tonight = [_pair(rng, 0.0, a_boot=rng.gauss(0, 0.03), b_boot=rng.gauss(0, 0.03)) for _ in range(2)]
    pooled = pooled_spread(0.028, learned, tonight)
    assert pooled.spread == pytest.approx(0.03 * math.sqrt(2), rel=0.25)
    assert pooled.source == (
        "the file's 2.8% worth 8 pairs, this host's 40 from 20 nights, tonight's 1, this host's own taken alone: "
        "wider than the pool"
    )  # its 41 degrees of freedom spread wider than the prior: taken alone (the next test)
    with pytest.raises(ValueError, match="positive, finite"):
        pooled_spread(0.028, SpreadSoFar(), [BootPair((1.0,), (math.nan,))])


def test_a_host_whose_own_pairs_spread_wider_than_the_pool_is_judged_by_its_own_spread() -> None:
    """The prior, worth 8 pairs, would keep shrinking a runner's wider boots toward the file's figure (a spread taken
    too narrow FAILs good builds): once the host's own pairs carry OWN_SPREAD_DF degrees of freedom and spread wider
    than the pool, they are taken alone, and the source says so. Narrower, or too few, they only join the pool."""
    rng = random.Random(23)
    wide = _nights_of(rng, 0.04, 10)  # B/A's SD 5.7 % against the file's 2.8 %, 20 degrees of freedom
    pooled = pooled_spread(0.028, wide, [])
    assert pooled.variance == pytest.approx(wide.variance) and pooled.df == wide.df
    assert pooled.source.endswith("this host's own taken alone: wider than the pool")
    mixed = (PRIOR_DF * 0.028**2 + wide.squares) / (PRIOR_DF + wide.df)
    assert pooled.variance > mixed  # what pooling alone would have used
    narrow = _nights_of(rng, 0.01, 10)
    assert "taken alone" not in pooled_spread(0.028, narrow, []).source
    assert pooled_spread(0.028, narrow, []).spread > math.sqrt(narrow.variance)  # the prior still widens it
    few = _nights_of(rng, 0.04, OWN_SPREAD_DF // 2 - 1)  # 2 df a night: under OWN_SPREAD_DF
    assert few.df < OWN_SPREAD_DF and "taken alone" not in pooled_spread(0.028, few, []).source


def test_boot_pairs_are_asked_one_at_a_time_and_stop_as_soon_as_they_decide(tmp_path: Path) -> None:
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
        remeasure=lambda r: pytest.fail("in turns a tripped cell is not rerun on its own boot"),
        paired=InTurn(measure),
    )
    decode = next(o for o in outcomes if o.cell == "tg32")
    assert decode.status == Status.FAIL and decode.in_turn and decode.pairs_measured == asked[-1]
    assert asked == list(range(1, asked[-1] + 1)) and 2 <= asked[-1] < 8  # from two pairs on, until it was clear
    assert "booted in turns with the last confirmed build (runtime runtime-2026-11-01" in decode.reason
    assert "pooled from the file's 2.8% worth 8 pairs" in decode.reason
    assert decode.last_good is not None and decode.last_good.id == "runtime-2026-11-01"


def test_the_boot_budget_ends_the_pairs_and_says_what_deciding_would_cost(tmp_path: Path) -> None:
    _seed(_ctx(tmp_path), tmp_path, 20.0)
    asked: list[int] = []
    made = [BootPair((20.0,) * 3, (20.0 * 0.97,) * 3), BootPair((20.0,) * 3, (20.0 * 0.975,) * 3)]

    def measure(result: Any, metric: str, wanted: int, a: BuildRef) -> list[BootPair]:
        asked.append(wanted)
        return made[:wanted]

    def boots_left() -> int:  # a budget of four boots: two boot pairs
        return 4 - 2 * len(asked)

    ctx = _ctx(tmp_path, "2026-11-20")
    decode = next(
        o
        for o in _judge(_case(17.0), ctx, paired=InTurn(measure, boots_left), pairs=SPARK_RULES)  # type: ignore[arg-type]
        if o.cell == "tg32"
    )
    assert asked == [1, 2] and decode.status == Status.INCONCLUSIVE and decode.pairs_measured == 2
    assert "the boot budget is spent (deciding would take about" in decode.reason and "boots)" in decode.reason
    assert decode.carry is not None and len(decode.carry.differences) == 2


def test_a_budget_spent_before_the_first_pair_leaves_the_cell_inconclusive(tmp_path: Path) -> None:
    _seed(_ctx(tmp_path), tmp_path, 20.0)
    decode = next(
        o
        for o in _judge(_case(17.0), _ctx(tmp_path), paired=InTurn(lambda *a: pytest.fail("no boot"), lambda: 1))  # type: ignore[arg-type]
        if o.cell == "tg32"
    )
    assert decode.status == Status.INCONCLUSIVE and "boot budget is spent before the first boot pair" in decode.reason


def test_a_last_confirmed_build_that_cannot_boot_in_its_turn_leaves_the_cell_unpaired(tmp_path: Path) -> None:
    _seed(_ctx(tmp_path), tmp_path, 20.0)
    decode = next(
        o
        for o in _judge(_case(17.0), _ctx(tmp_path), paired=InTurn(lambda *a: None))  # type: ignore[arg-type]
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
        self.profile = type("Profile", (), {"boot_budget": BootBudget()})()

    def boots_left(self) -> int:
        return 1000

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
    case = (_case(18.0).pp_cell, _case(18.0).tg_cell)
    other = (replace(case[0], name="pp128 (c4)", concurrency=4), replace(case[1], name="tg32 (c4)", concurrency=4))
    boots = pairs.boots_in_turn(fake, "m", [case, other], watch=watch, say=lambda line: None)  # type: ignore[arg-type]
    measure = boots.measure
    three = measure(_case(18.0), "tg_tps", 3, _build("a"))
    assert fake.events == ["A", "B", "B", "A", "A", "B"]  # A B, B A, A B: every B half a boot of its own
    per_boot = 2 * (pairs.WARMUP_RUNS + pairs.RUNS_PER_BOOT)  # every case of the entry in each boot
    assert served == [side for side in fake.events for _ in range(per_boot)] and len(windows) == 6
    assert three  # not empty: an assert over nothing passes
    assert three is not None and all(p.difference() == pytest.approx(math.log(0.5)) for p in three)
    assert all(len(p.a) == len(p.b) == pairs.RUNS_PER_BOOT for p in three)
    assert measure(_case(18.0), "pp_tps", 3, _build("a")) is not None and len(fake.events) == 6  # the other cell
    four = measure(_case(18.0), "tg_tps", 4, _build("a"))
    assert fake.events[6:] == ["B", "A"] and four is not None and four[:3] == three
    failing = FakeTurns(fail_a_at=2)
    assert (
        pairs.boots_in_turn(failing, "m", [case], watch=watch, say=lambda line: None).measure(  # type: ignore[arg-type]
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
    # B0, then A B / B A ...: the 8 pairs the Spark's budget of 16 boots pays for while they lean to a slowdown
    assert [side for _, side, _ in headings] == ["B", *"ABBAABBAABBAABBA"]
    assert headings[0][2] == "tonight's bench" and "only if the pairs before" in headings[5][2]
    names = re.findall(r"docker run --rm --name (\S+)", out)
    removed = re.findall(r"# on exit: docker rm --force (\S+)", out)
    assert len(names) == len(set(names)) == 17 and removed == names  # each clean-up removes only its own boot
    images = re.findall(r" (spark-nightly/runtime:\S+) vllm serve", out)
    assert images == ["spark-nightly/runtime:tonight" if s == "B" else "spark-nightly/runtime:last-confirmed"
                      for _, s, _ in headings]  # fmt: skip
    assert (
        "1 server at a time" in out and "drop the page cache" in out and f"{1 + 2 * MIN_BOOT_PAIRS} to 17 boots" in out
    )


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


def _book_ctx(tmp_path: Path, night: str) -> Any:
    return replace(_ctx(tmp_path, night), pair_book=PairBook(tmp_path / "pairs.json"))


def test_undecided_pairs_are_kept_and_pair_the_next_night_even_when_its_screen_is_clean(tmp_path: Path) -> None:
    """Night 1 trips and its budget (two boot pairs) leaves a leaning slowdown undecided: the pair book keeps it. Night
    2 screens clean, yet it pairs (the evidence is open) and the carried pairs with its own FAIL the build; the
    decision clears the book's evidence and both nights' pairs taught the host's boot spread."""
    _seed(_ctx(tmp_path), tmp_path, 20.0)
    leaning = [BootPair((20.0,) * 3, (20.0 * f,) * 3) for f in (0.955, 0.96, 0.95, 0.955)]
    asked: list[int] = []

    def measure(result: Any, metric: str, wanted: int, a: BuildRef) -> list[BootPair]:
        asked.append(wanted)
        return leaning[2 * (len(asked) > 2) :][:wanted]

    first = next(
        o
        for o in _judge(
            _case(17.0),
            _book_ctx(tmp_path, "2026-11-20"),
            paired=InTurn(measure, lambda: 6 - 2 * len(asked)),
            pairs=SPARK_RULES,
        )  # type: ignore[arg-type]
        if o.cell == "tg32"
    )
    assert first.status == Status.INCONCLUSIVE and "carried to the next night" in first.reason
    book = PairBook(tmp_path / "pairs.json")
    key = _ctx(tmp_path).series("tg32", "tg_tps")
    assert book.carried("host", key) is not None and book.spread("host", key).df == 1
    second = next(
        o
        for o in _judge(
            _case(20.0),
            _book_ctx(tmp_path, "2026-11-21"),
            paired=InTurn(measure, lambda: 10 - 2 * len(asked)),
            pairs=SPARK_RULES,
        )  # type: ignore[arg-type]
        if o.cell == "tg32"
    )
    assert second.status == Status.FAIL, second.reason
    assert "undecided boot pairs are carried" in second.reason and "carried from 2026-11-20" in second.reason
    assert book.carried("host", key) is None and book.spread("host", key).df == 2


def test_a_night_of_a_itself_spends_no_boot_on_evidence_carried_against_it(tmp_path: Path) -> None:
    """The GPU's good night after a slower one whose pp128 pairs were carried undecided: tonight's build is A itself,
    so there is nothing to pair, and a fresh boot of it cannot add to that evidence. A clean screen PASSes it on its
    bench boot (an H200 spent 73 s booting it again before)."""
    _seed(_ctx(tmp_path), tmp_path, 20.0)
    leaning = [BootPair((20.0,) * 3, (20.0 * f,) * 3) for f in (0.955, 0.96)]
    asked: list[int] = []

    def measure(result: Any, metric: str, wanted: int, a: BuildRef) -> list[BootPair]:
        asked.append(wanted)
        return leaning[:wanted]

    undecided = next(
        o
        for o in _judge(
            _case(17.0),
            _book_ctx(tmp_path, "2026-11-20"),
            paired=InTurn(measure, lambda: 4 - 2 * len(asked)),  # a budget of two boot pairs
            pairs=SPARK_RULES,
        )  # type: ignore[arg-type]
        if o.cell == "tg32"
    )
    assert undecided.status == Status.INCONCLUSIVE and "carried to the next night" in undecided.reason

    def no_fresh_boot(result: Any) -> Any:
        raise AssertionError("A itself was booted again for evidence carried against it")

    ctx = replace(_book_ctx(tmp_path, "2026-11-21"), build=_build("2026-11-01"))  # A itself
    outcomes = _judge(_case(20.0), ctx, remeasure=no_fresh_boot, paired=InTurn(lambda *a: None, lambda: 4))  # type: ignore[arg-type]
    tonight = next(o for o in outcomes if o.cell == "tg32")
    assert tonight.status == Status.PASS and "tripped" not in tonight.reason, tonight.reason


def _a_boots(count: int) -> str:
    """How a reason counts A's boots from the boot pairs."""
    return f"{count} boot{'s' if count != 1 else ''} of this build as A in boot pairs"


def test_a_moves_only_where_the_boot_pairs_interval_rules_out_any_loss(tmp_path: Path) -> None:
    """The boot pairs that decide (one at the operating point) 6 % faster PASS tonight's build, but with the boot
    spread their interval reaches just below 1 (within the 1 % slack pairs side by side have): A stays. 10 % faster
    rules any loss out: A moves."""
    _seed(_ctx(tmp_path), tmp_path, 20.0)

    def pairs_at(factor: float) -> InTurn:
        made = [BootPair((20.0,) * 3, (20.0 * factor,) * 3)] * 2
        return InTurn(lambda result, metric, wanted, a: made[:wanted])

    assert MIN_BOOT_PAIRS == 1  # the factors below put one pair's interval where the docstring says
    slightly = _ctx(tmp_path, "2026-11-20")
    decode = next(
        o for o in _judge(_case(17.0), slightly, paired=pairs_at(1.06), pairs=SPARK_RULES) if o.cell == "tg32"
    )  # type: ignore[arg-type]
    assert decode.status == Status.PASS and decode.confirmation is not None
    assert 0.99 <= decode.confirmation.ci_low < 1.0, decode.reason
    assert _a_of(slightly) == "runtime-2026-11-01"
    clearly = _ctx(tmp_path, "2026-11-21")
    decode = next(o for o in _judge(_case(17.0), clearly, paired=pairs_at(1.10), pairs=SPARK_RULES) if o.cell == "tg32")  # type: ignore[arg-type]
    assert decode.confirmation is not None and decode.confirmation.ci_low >= 1.0, decode.reason
    assert _a_of(clearly) == "runtime-2026-11-21"


def test_turns_count_their_boots_against_the_budget(tmp_path: Path) -> None:
    started: list[str] = []
    entry = type("Entry", (), {"id": "m"})()
    budgeted = turns.Turns(
        entry, object(), _restartable(started), tmp_path, tmp_path, lambda line: None, lambda: None, budget=3
    )  # type: ignore[arg-type]
    assert budgeted.boots_left() == 3
    budgeted.fresh_tonight("boot pair 1")
    assert budgeted.boots_left() == 2
    assert turns.Turns(entry, object(), _restartable([]), tmp_path, tmp_path, lambda line: None).boots_left() >= 16  # type: ignore[arg-type]


def test_bench_refuses_to_pair_a_running_server_on_a_profile_that_holds_one(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["bench", "gpt-oss-120b", "--profile", "spark", "--url", "http://127.0.0.1:9", "--pair-with", "last-good"]
    )
    assert code == 2
    assert "holds one server at a time" in capsys.readouterr().err


def test_the_last_confirmed_build_that_trips_in_turns_is_measured_again_on_a_fresh_boot(tmp_path: Path) -> None:
    """The GPU's good night after a slower build: tonight's build is A itself and its one boot measured 18 % slow.
    Pairs of a build with itself decide nothing; a fresh boot of it does. Within the screen there, it PASSes (which
    closes the open alert); slow again, the night is the host's, INCONCLUSIVE; with no boot left, no rerun is made."""
    _seed(_ctx(tmp_path), tmp_path, 20.0)
    _judge(_case(9.0), _ctx(tmp_path, "2026-11-20"), paired=InTurn(lambda *a: [BootPair((20.0,) * 3, (9.0,) * 3)] * 8))  # type: ignore[arg-type]

    def never(*args: Any) -> None:
        raise AssertionError("pairs of a build with itself were measured")

    fresh: list[str] = []

    def on_a_fresh_boot(value: float) -> Any:
        def remeasure(result: Any) -> Any:
            fresh.append("boot")
            return _case(value)

        return remeasure

    def night(day: str, rerun: float, boots_left: int) -> Any:
        ctx = _ctx(tmp_path, day, build="2026-11-01")  # tonight's build is A itself
        outcomes = _judge(
            _case(16.4),
            ctx,
            remeasure=on_a_fresh_boot(rerun),
            paired=InTurn(never, lambda: boots_left),  # type: ignore[arg-type]
        )
        return next(o for o in outcomes if o.cell == "tg32")

    passed = night("2026-11-21", 19.8, 4)
    assert passed.status == Status.PASS and fresh == ["boot"], passed.reason
    assert "passed on a fresh boot" in passed.reason and "the last confirmed build itself" in passed.reason
    fresh.clear()
    slow_again = night("2026-11-22", 16.0, 4)
    assert slow_again.status == Status.INCONCLUSIVE and fresh == ["boot"], slow_again.reason
    assert "points at the host or the night" in slow_again.reason
    fresh.clear()
    no_boot = night("2026-11-23", 19.8, 0)
    assert no_boot.status == Status.INCONCLUSIVE and not fresh and "no boot left" in no_boot.reason


def test_the_last_confirmed_build_is_judged_against_its_boots_as_a_not_only_its_one_fast_accepted_night(
    tmp_path: Path,
) -> None:
    """The CI host's and the GPU's good night after a slower build: the host's one accepted night was a fast boot
    (20 t/s), the slower build's boot pairs booted A at 16.5, and tonight A itself measures 16.4, 18 % under that
    night, on its bench boot and on a fresh one. Judged against the accepted night alone it could never PASS (the
    alert it should close stays open); against that night and A's boots it PASSes on the bench boot. Where A's
    boots measured what the night did (20), the slow night is still the host's: INCONCLUSIVE.
    A changed build tonight is judged against the accepted nights alone."""

    def nights(folder: str, a_measured: float, tonight: str = "2026-11-01") -> CellOutcome:
        root = tmp_path / folder
        root.mkdir()
        _seed(_book_ctx(root, "2026-11-01"), root, 20.0, nights=1)  # night 1: the first accepted night, A
        pair = BootPair((a_measured,) * 3, (9.0,) * 3)
        slower = _judge(_case(9.0), _book_ctx(root, "2026-11-20"), paired=InTurn(lambda r, m, n, a: [pair] * n))  # type: ignore[arg-type]
        assert next(o for o in slower if o.cell == "tg32").status == Status.FAIL
        ctx = replace(_book_ctx(root, "2026-11-21"), build=_build(tonight))
        fresh = lambda result: _case(16.0)  # noqa: E731 -- a fresh boot, as slow again
        outcomes = _judge(_case(16.4), ctx, remeasure=fresh, paired=InTurn(lambda *a: None, lambda: 4))  # type: ignore[arg-type]
        return next(o for o in outcomes if o.cell == "tg32")

    judged_by_its_boots = nights("slower-a-boots", 16.5)
    assert judged_by_its_boots.status == Status.PASS, judged_by_its_boots.reason
    yardstick = re.search(
        rf"this host's 1 accepted night and {_a_boots(MIN_BOOT_PAIRS)}: ([\d.]+) t/s", (judged_by_its_boots.reason)
    )
    assert yardstick is not None and float(yardstick[1]) < 20.0, judged_by_its_boots.reason  # A's boots pulled it down
    host_slower_tonight = nights("fast-a-boots", 20.0)
    assert host_slower_tonight.status == Status.INCONCLUSIVE, host_slower_tonight.reason
    yardstick = re.search(
        rf"this host's 1 accepted night and {_a_boots(MIN_BOOT_PAIRS)}: ([\d.]+) t/s", (host_slower_tonight.reason)
    )
    assert yardstick is not None and float(yardstick[1]) > 19.5, host_slower_tonight.reason  # A's boots as fast
    assert "points at the host or the night" in host_slower_tonight.reason
    changed = nights("changed-build", 16.5, tonight="2026-11-21")
    assert changed.status == Status.FAIL and "still regressed: tonight -17.17% vs median of 1 night," in changed.reason


def test_an_unchanged_builds_yardstick_is_the_latest_fourteen_of_its_accepted_nights_and_boots_as_a(
    tmp_path: Path,
) -> None:
    _seed(_book_ctx(tmp_path, "2026-11-01"), tmp_path, 20.0, nights=14)
    pair = BootPair((20.0,) * 3, (9.0,) * 3)
    _judge(_case(9.0), _book_ctx(tmp_path, "2026-11-20"), paired=InTurn(lambda r, m, n, a: [pair] * n))  # type: ignore[arg-type]

    def a_itself(night: str) -> str:
        ctx = replace(_book_ctx(tmp_path, night), build=_build("2026-11-01"))
        outcomes = _judge(_case(20.0), ctx, paired=InTurn(lambda *a: None, lambda: 4))  # type: ignore[arg-type]
        return next(o for o in outcomes if o.cell == "tg32").reason

    # the yardstick holds 14: the latest accepted nights and A's boots from the slower night's pairs, newest first
    kept = 14 - MIN_BOOT_PAIRS
    assert f"this host's {kept} accepted nights and {_a_boots(MIN_BOOT_PAIRS)}: " in a_itself("2026-11-21")
    reasons = [a_itself(f"2026-12-{day:02d}") for day in range(1, 15)]  # 14 more accepted nights of A itself
    assert f"this host's 13 accepted nights and {_a_boots(1)}: " in reasons[-2]
    assert "this host's 14 accepted nights: " in reasons[-1]  # A's boots now older than the latest 14


def test_the_pair_book_keeps_the_latest_boots_of_the_current_a_and_forgets_them_when_a_moves(tmp_path: Path) -> None:
    book = PairBook(tmp_path / "pairs.json")
    boots = [ABoot(f"2026-11-{day:02d}", f"run-{day}", (float(day),) * 3) for day in range(1, 6)]
    book.record("host", "k", [0.01, -0.01], None, a="a1", a_boots=boots[:3], keep=4)
    book.record("host", "k", [0.02, -0.02], None, a="a1", a_boots=boots[3:], keep=4)
    assert book.a_boots("host", "k", "a1") == boots[1:]  # the latest four, oldest first
    assert book.a_boots("host", "k", "a2") == [] and book.a_boots("other", "k", "a1") == []
    book.record("host", "k", [0.0, 0.0], None, a="a2", a_boots=boots[:1], keep=4)
    assert book.a_boots("host", "k", "a1") == [] and book.a_boots("host", "k", "a2") == boots[:1]
    assert book.spread("host", "k").df == 3  # the spread goes on learning whichever A the pairs were against


def _measured_in_turns(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    run_bench: Any,
    judge_results: Any,
    benched: list[str],
    ctx: Any,
    servers_at_once: int = 1,
) -> tuple[list[str], turns.Turns]:
    """perf_run.measure_and_judge over a one-server profile (or `servers_at_once`), its bench and judging given by
    the test, each health window noted in `benched`: the boots of tonight's build as started and stopped, and the
    Turns that made them."""

    @contextmanager
    def watched(profile: Any) -> Iterator[None]:
        benched.append("window")
        yield

    monkeypatch.setattr(perf_run, "run_bench", run_bench)
    monkeypatch.setattr(perf_run, "judge_results", judge_results)
    monkeypatch.setattr(perf_run, "judge_window", lambda profile, window: HEALTHY)
    monkeypatch.setattr(perf_run, "watched", watched)
    monkeypatch.setattr(perf_run, "boots_in_turn", lambda *a, **kw: InTurn(lambda *b: None))
    started: list[str] = []
    bench = type("Bench", (), {"cases": lambda self: []})()
    entry = type("Entry", (), {"id": "m", "served_model_name": "m", "bench": bench})()
    profile = type("Profile", (), {"servers_at_once": servers_at_once})()
    held = turns.Turns(entry, profile, _restartable(started), tmp_path, tmp_path, lambda line: None, lambda: None)  # type: ignore[arg-type]
    perf_run.measure_and_judge(
        held,
        entry,  # type: ignore[arg-type]
        ctx,
        profile=profile,  # type: ignore[arg-type]
        spec=None,  # type: ignore[arg-type]
        thresholds=_thresholds(),
        before=HEALTHY,
        cache_dir=tmp_path,
        log_dir=tmp_path,
        say=lambda line: None,
    )
    return started, held


def test_the_nightlys_rerun_in_turns_is_one_fresh_boot_that_measures_every_case(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Two tripped cases of A itself ask for a rerun: one fresh boot of tonight's build measures both, in a health
    window of its own; the bench boot is not measured again."""
    c1 = _case(16.0)
    c4 = replace(c1, pp_cell=replace(c1.pp_cell, name="pp128 (c4)"), tg_cell=replace(c1.tg_cell, name="tg32 (c4)"))
    benched: list[str] = []

    def run_bench(client: str, model: str, spec: Any, *, say: Any = None) -> list[Any]:
        benched.append(client)
        return [c1, c4]

    rerun: list[Any] = []

    def judge_results(results: Any, thresholds: Any, ctx: Any, *, remeasure: Any, **kw: Any) -> list[Any]:
        rerun.extend(remeasure(r) for r in results)
        return []

    started, held = _measured_in_turns(monkeypatch, tmp_path, run_bench, judge_results, benched, _ctx(tmp_path))
    assert started == ["tonight-0", "stopped tonight-0", "tonight-1"]  # the bench boot, then one fresh boot
    assert benched == ["tonight-0", "window", "tonight-1"]
    assert [b.why for b in held.boots] == ["a rerun on a fresh boot"]
    assert rerun == [c1, c4]


def test_side_by_side_the_judge_is_given_one_fresh_boot_of_tonights_build_for_the_rerun_of_a_itself(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Where two servers fit, the judge is given fresh boots of tonight's build too, for the rerun of A itself: the
    first made once, measuring every case, in a window of its own (test_perf_judge: a changed build keeps its
    same-boot rerun)."""
    c1 = _case(16.0)
    benched: list[str] = []

    def run_bench(client: str, model: str, spec: Any, *, say: Any = None) -> list[Any]:
        benched.append(client)
        return [c1]

    asked: dict[str, Any] = {}

    def judge_results(results: Any, thresholds: Any, ctx: Any, *, boot_again: Any, **kw: Any) -> list[Any]:
        asked.update(fresh=[boot_again(c1, 1), boot_again(c1, 1)])
        return []

    started, held = _measured_in_turns(
        monkeypatch, tmp_path, run_bench, judge_results, benched, _ctx(tmp_path), servers_at_once=2
    )
    assert asked == {"fresh": [c1, c1]}
    assert started == ["tonight-0", "stopped tonight-0", "tonight-1"]  # the bench boot, then one fresh boot
    assert benched == ["tonight-0", "window", "tonight-1"]
    assert [b.why for b in held.boots] == ["a rerun on a fresh boot"]


def test_a_trials_further_boots_are_fresh_boots_of_its_build_shared_by_every_cell(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A bisection step whose cells lie between tonight's two builds asks for more boots of its build: the n-th fresh
    boot is made once, when a cell first asks for it, measures every case, and is counted among the turns' boots."""
    benched: list[str] = []
    made: list[list[Any]] = []  # each boot's two cases, the bench boot first

    def run_bench(client: str, model: str, spec: Any, *, say: Any = None) -> list[Any]:
        benched.append(client)
        c1 = _case(16.0 + len(made))  # each boot measures its own figures
        c4 = replace(c1, pp_cell=replace(c1.pp_cell, name="pp128 (c4)"), tg_cell=replace(c1.tg_cell, name="tg32 (c4)"))
        made.append([c1, c4])
        return [c1, c4]

    asked: list[Any] = []

    def judge_results(results: Any, thresholds: Any, ctx: Any, *, boot_again: Any, **kw: Any) -> list[Any]:
        c1, c4 = results
        asked.extend([boot_again(c1, 1), boot_again(c4, 1), boot_again(c4, 2), boot_again(c1, 2)])
        return []

    ctx = replace(_ctx(tmp_path), slowdowns={"tg32": 0.75}, step_boots=3)
    started, held = _measured_in_turns(monkeypatch, tmp_path, run_bench, judge_results, benched, ctx)
    assert started == ["tonight-0", "stopped tonight-0", "tonight-1", "stopped tonight-1", "tonight-2"]
    assert benched == ["tonight-0", "window", "tonight-1", "window", "tonight-2"]
    assert [b.why for b in held.boots] == ["boot 2 of this build", "boot 3 of this build"]
    assert len(made) == 3 and asked == [made[1][0], made[1][1], made[2][1], made[2][0]]


def _two_cells_in_turn(tmp_path: Path, tg: float, pp: float, budget: int) -> tuple[list[CellOutcome], list[int]]:
    """A night whose two cells trip, measured in boot pairs that serve both: tg32 at B/A `tg`, pp128 at `pp`."""
    _seed(_ctx(tmp_path), tmp_path, 20.0)
    rng = random.Random(7)
    made = [
        (
            BootPair((20.0,) * 3, (20.0 * tg * math.exp(rng.gauss(0, 0.01)),) * 3),
            BootPair((20.0,) * 3, (20.0 * pp,) * 3),
        )
        for _ in range(8)
    ]
    booted: list[int] = []

    def measure(result: Any, metric: str, wanted: int, a: BuildRef) -> list[BootPair]:
        while len(booted) < wanted:
            booted.append(len(booted) + 1)
        return [pair[0] if metric == "tg_tps" else pair[1] for pair in made[:wanted]]

    measured = InTurn(measure, lambda: budget - 2 * len(booted), measured=lambda a: len(booted))
    tonight = _case(9.0)
    slow_prefill = tuple(  # tonight's bench boot measured prefill 10 % slow too: both cells trip
        RunSample(tuple(replace(r, est_ppt_s=r.est_ppt_s * 1.1) for r in run.requests)) for run in tonight.runs
    )
    tonight = replace(tonight, runs=slow_prefill)
    return _judge(tonight, _ctx(tmp_path, "2026-11-20"), paired=measured, pairs=SPARK_RULES), booted  # type: ignore[arg-type]


def test_once_one_cell_fails_the_entry_no_boot_is_spent_on_another_cells_undecided_pairs(tmp_path: Path) -> None:
    """The GPU's slower night: tg32 fell by half, pp128 (first in the case) by 2 %, between no slowdown and the
    smallest that matters, where the sequential test decides slowest. The cell that tripped hardest is judged first
    and FAILs on the first boot pairs asked; pp128 is judged on those pairs and no more boots are made for it."""
    outcomes, booted = _two_cells_in_turn(tmp_path, tg=0.5, pp=0.98, budget=16)
    by_cell = {o.cell: o for o in outcomes}
    first = list(range(1, MIN_BOOT_PAIRS + 1))
    assert [o.cell for o in outcomes] == ["pp128", "tg32"]  # reported in the case's order
    assert by_cell["tg32"].status == Status.FAIL and by_cell["tg32"].pairs_measured == MIN_BOOT_PAIRS
    assert booted == first, booted
    assert by_cell["pp128"].pairs_measured == MIN_BOOT_PAIRS and by_cell["pp128"].status != Status.FAIL
    assert "already FAILs the entry" in by_cell["pp128"].reason, by_cell["pp128"].reason
    (tmp_path / "leaning").mkdir()
    outcomes, booted = _two_cells_in_turn(tmp_path / "leaning", tg=0.5, pp=0.96, budget=16)
    prefill = next(o for o in outcomes if o.cell == "pp128")
    assert booted == first and prefill.status == Status.INCONCLUSIVE and prefill.carry is not None
    assert "no boot more for it: tg32 already FAILs the entry (deciding would take about" in prefill.reason


def test_pairs_measured_for_one_cell_serve_another_when_the_budget_is_spent(tmp_path: Path) -> None:
    """The budget (four boots) is spent by the first cell's pairs: the second cell is still judged on them (they
    cost no boot), not left without pairs."""
    outcomes, booted = _two_cells_in_turn(tmp_path, tg=0.985, pp=0.984, budget=4)
    assert booted == [1, 2]
    assert outcomes  # not empty: an assert over nothing passes
    assert all(o.pairs_measured == 2 for o in outcomes), [(o.cell, o.reason) for o in outcomes]


GPU_RULES = PairRules(min_effect=0.13, boot_sd=0.065)  # thresholds/h200-gpu's pair rules


def test_a_trials_rules_ask_whether_its_build_carries_tonights_slowdown() -> None:
    """Tonight's pairs FAILed a cell at B/A 0.45: a trial's line is half that slowdown in log (B/A 0.67), and its
    sequential test weighs all of it against none. Never below the hardware's own; a B/A of 1 or more asks nothing."""
    tonight = GPU_RULES.against_tonight(0.45)
    assert tonight.shift() == pytest.approx(-math.log(0.45)) and tonight.min_effect == pytest.approx(1 - 0.45**0.5)
    assert (tonight.boot_sd, tonight.max_pairs) == (GPU_RULES.boot_sd, GPU_RULES.max_pairs)
    small = GPU_RULES.against_tonight(0.95)  # smaller than the hardware's smallest slowdown: its rules stand
    assert small.min_effect == GPU_RULES.min_effect and small.shift() == pytest.approx(GPU_RULES.shift())
    assert GPU_RULES.against_tonight(1.02) == GPU_RULES and GPU_RULES.against_tonight(0.0) == GPU_RULES


def _trial_step(
    tmp_path: Path,
    step: str,
    factor: float,
    slowdowns: dict[str, float | None],
    *,
    book: str = "pairs.json",
    prefill: float = 1.0,
    against_a: float | None = None,
    again: tuple[float, ...] = (),
    again_prefill: tuple[float, ...] = (),
    step_boots: int = 1,
    least_boots: int = 1,
    earlier: tuple[float, ...] = (),
    budget: int = 1000,
) -> tuple[dict[str, CellOutcome], list[int]]:
    """A bisection step after a night whose tg32 pairs FAILed: the step's build measures `factor` of the good nights'
    decode (prefill `prefill` times as slow), its boot pairs B/A `against_a` (`factor` where not given); its fresh
    boots, where a cell asks for them (at most `step_boots` boots in all, at least `least_boots`, `budget` fresh boots
    tonight; `earlier` the decode of a first look's boots, where this is a second), measure
    `again` of its decode (and `again_prefill` times as slow a prefill, else `prefill`) in turn; the history read,
    never written; the pair book `book` (the night's own by default). Each fresh boot is made once, when first asked
    for, as a negative number in the list of what was asked."""
    asked: list[int] = []
    rng = random.Random(step)

    def measure(result: Any, metric: str, wanted: int, a: BuildRef) -> list[BootPair]:
        asked.append(wanted)
        effect = (factor if against_a is None else against_a) - 1.0
        return [_pair(rng, effect, b_boot=rng.gauss(0, 0.03)) for _ in range(wanted)]

    ctx = replace(_ctx(tmp_path, "2026-11-20"), pair_book=PairBook(tmp_path / book))
    ctx = replace(ctx, run_id=f"run-{step}", build=_build(step), record=False, slowdowns=slowdowns)
    ctx = replace(ctx, step_boots=step_boots, least_step_boots=least_boots)
    ctx = replace(ctx, earlier_step_logs={"tg32": tuple(math.log(20.0 * x) for x in earlier)} if earlier else {})

    def measured_at(decode: float, slower_prefill: float = prefill) -> Any:
        case = _case(20.0 * decode)
        runs = case.runs
        slower = tuple(
            RunSample(tuple(replace(r, est_ppt_s=r.est_ppt_s * slower_prefill) for r in run.requests)) for run in runs
        )
        return replace(case, runs=slower)

    fresh: dict[int, Any] = {}

    def boot_again(result: Any, number: int) -> Any:
        if number not in fresh:
            if number > budget:
                return None
            asked.append(-number)
            fresh[number] = measured_at(again[number - 1], (again_prefill or (prefill,) * len(again))[number - 1])
        return fresh[number]

    outcomes = judge_results(
        [measured_at(factor)], _thresholds(GPU_RULES), ctx, health_before=HEALTHY, health_after=HEALTHY,
        remeasure=lambda r: pytest.fail("a trial's step is not measured again as A itself"),
        paired=InTurn(measure), boot_again=boot_again,  # type: ignore[arg-type]
    )  # fmt: skip
    return {o.cell: o for o in outcomes}, asked


def test_a_bisection_step_is_decided_against_tonights_slowdown_by_its_screen_or_one_boot_pair(tmp_path: Path) -> None:
    """The GPU's day of 16 commits: tonight's night FAILed tg32 by its boot pairs at 0.45x, which opened the cell's
    regression, so a step's clean screen cannot PASS it by the night's rules and only pairs can (at the stricter bound
    that closes a regression), more than one boot pair for an unchanged step. Asked whether it carries tonight's
    slowdown, where no boot of A from tonight is kept (side by side, none is), its clean screen answers (no boot
    pair), and a slower step FAILs; after a night only 15 % slower neither tonight's boots of A nor the screen can
    tell, and a boot pair or two against A do."""
    _seed(_ctx(tmp_path), tmp_path, 20.0)
    night = [BootPair((20.0,) * 3, (9.0,) * 3)] * 2
    tonight = _book_ctx(tmp_path, "2026-11-20")
    opened = _judge(_case(9.0), tonight, paired=InTurn(lambda r, m, n, a: night[:n]), pairs=GPU_RULES)  # type: ignore[arg-type]
    assert next(o for o in opened if o.cell == "tg32").status == Status.FAIL
    usual, usual_asked = _trial_step(tmp_path, "good-usual", 1.0, {}, book="none.json")
    assert usual["tg32"].status == Status.PASS and usual_asked[-1] > 1, usual["tg32"].reason
    found, good_asked = _trial_step(tmp_path, "good", 1.0, {"tg32": 0.45}, book="none.json")
    good = found["tg32"]
    assert good.status == Status.PASS and good_asked == [], good.reason
    assert "against tonight's slowdown (B/A 0.45) that change weighs" in good.reason
    assert good.reason.endswith("it does not carry tonight's slowdown, no boot pair needed")
    found, bad_asked = _trial_step(tmp_path, "bad", 0.45, {"tg32": 0.45}, book="none.json")
    assert found["tg32"].status == Status.FAIL and bad_asked in ([], [1]), found["tg32"].reason
    # after a night only 15 % slower the screen cannot tell, and with no boot of A kept from tonight boot pairs do
    found, milder_asked = _trial_step(tmp_path, "milder", 1.0, {"tg32": 0.85}, book="none.json", against_a=1.0)
    milder = found["tg32"]
    assert milder.status == Status.PASS and milder_asked in ([1], [1, 2]), milder.reason
    assert f"log-likelihood ratio of a {0.15:.0%} slowdown" in milder.reason
    assert milder.reason.endswith("asked whether it carries tonight's slowdown (B/A 0.85)")
    passed = perf_verdict("m", JudgedPerf([], HEALTHY, list(found.values())), HEALTHY).reason
    assert passed.endswith(f"; {headline(milder)}") and re.search(r"over \d boot pairs?, PASS$", passed), passed
    # with tonight's boots of A kept (the night's own book), one boot of the step tells "like A" from "like B"
    found, one_asked = _trial_step(tmp_path, "milder-one-boot", 1.0, {"tg32": 0.85})
    assert found["tg32"].status == Status.PASS and one_asked == [], found["tg32"].reason
    assert "B/A 1.0000 (one boot) against tonight's 1 boot of the last confirmed build" in found["tg32"].reason


def test_a_bisection_step_on_a_host_that_drifted_is_weighed_against_tonights_boots_of_a(tmp_path: Path) -> None:
    """The seventh GPU sitting: within the hour the host measured both builds 30-40 % under its first night, so every
    cell of every step trips its screen and would ask boot pairs, two boots each. Tonight's pairs booted A at that
    level, and the pair book keeps those boots: a step's own boot weighed against them decides it, an unchanged step
    PASSing and one that carries tonight's slowdown FAILing, with no boot pair; prefill, which did not FAIL tonight,
    is not asked, though it trips too."""
    _seed(_ctx(tmp_path), tmp_path, 20.0)
    drifted = 13.0
    night = [BootPair((drifted * 1.01,) * 3, (drifted * 0.45,) * 3), BootPair((drifted * 0.98,) * 3, (5.9,) * 3)]
    tonight = _book_ctx(tmp_path, "2026-11-20")
    opened = _judge(_case(5.9), tonight, paired=InTurn(lambda r, m, n, a: night[:n]), pairs=GPU_RULES)  # type: ignore[arg-type]
    failed = next(o for o in opened if o.cell == "tg32")
    assert failed.status == Status.FAIL and failed.confirmation is not None, failed.reason
    slowdown = failed.confirmation.mean_ratio
    good, good_asked = _trial_step(tmp_path, "good", drifted / 20.0, {"tg32": slowdown}, prefill=1.4)
    assert good_asked == [], good["tg32"].reason
    assert good["tg32"].status == Status.PASS and good["tg32"].confirmation is not None
    assert good["tg32"].screen is not None and good["tg32"].screen.tripped  # the screen would have asked boot pairs
    boots = f"{failed.pairs_measured} boot{'s' if failed.pairs_measured != 1 else ''}"
    assert f"against tonight's {boots} of the last confirmed build" in good["tg32"].reason
    assert good["tg32"].reason.endswith("it does not carry tonight's slowdown, no boot pair needed")
    assert good["pp128"].status == Status.PASS and good["pp128"].screen is not None and good["pp128"].screen.tripped
    assert good["pp128"].reason.startswith("not asked: a trial asks only about the cells that FAILed tonight (tg32)")
    # a passing step's reason says what the cell it was asked about measured against tonight's A, as a failing one's
    passed = perf_verdict("m", JudgedPerf([], HEALTHY, list(good.values())), HEALTHY).reason
    assert passed.endswith(f"; {headline(good['tg32'])}") and "one boot against tonight's" in passed, passed
    bad, bad_asked = _trial_step(tmp_path, "bad", drifted * 0.46 / 20.0, {"tg32": slowdown}, prefill=1.4)
    assert bad_asked == [] and bad["tg32"].status == Status.FAIL, bad["tg32"].reason
    assert bad["tg32"].reason.endswith("it carries tonight's slowdown, no boot pair needed")
    assert bad["tg32"].confirmation is not None and bad["tg32"].confirmation.mean_ratio < 0.5
    # the bisection table and the step's reason say what decided it, not the accepted night the host drifted from
    ratio = bad["tg32"].confirmation.mean_ratio
    assert (
        headline(bad["tg32"])
        == f"tg32: {ratio:.2f}x the last confirmed build, one boot against tonight's {boots} of it, FAIL"
    )
    # with no boot of A kept from tonight, the tripped step's own boot pairs (A as drifted as it) answer it: it is not
    # held to the night's open regression, which would FAIL it as "still regressed" without a pair
    kept, kept_asked = _trial_step(
        tmp_path, "good-no-boots", drifted / 20.0, {"tg32": slowdown}, book="none.json", against_a=1.0
    )
    assert kept["tg32"].status == Status.PASS and kept_asked == [1], kept["tg32"].reason
    assert kept["tg32"].reason.endswith(f"asked whether it carries tonight's slowdown (B/A {slowdown:.2f})")


def _night_failed_at(tmp_path: Path, b_over_a: float, *, prefill: bool = False) -> dict[str, float]:
    """A night on the GPU whose tg32 boot pairs (A at the good nights' 20 t/s), and with `prefill` its pp128 pairs
    too, FAILed tonight's build at about `b_over_a`: the B/A each FAILed cell's pairs FAILed it at (the pair book
    keeps tonight's boots of A)."""
    _seed(_ctx(tmp_path), tmp_path, 20.0)
    night = [BootPair((20.0,) * 3, (20.0 * b_over_a,) * 3)] * 2
    tonight = _book_ctx(tmp_path, "2026-11-20")
    case = _case(20.0 * b_over_a)
    if prefill:
        runs = tuple(
            RunSample(tuple(replace(r, est_ppt_s=r.est_ppt_s / b_over_a) for r in run.requests)) for run in case.runs
        )
        case = replace(case, runs=runs)
    booted: list[int] = []

    def measure(result: Any, metric: str, wanted: int, a: BuildRef) -> list[BootPair]:
        booted[:] = range(max(wanted, len(booted)))
        scale = 512.0 / 20.0 if metric == "pp_tps" else 1.0  # each cell at its own figures (the file's 512 and 20)
        return [BootPair(tuple(x * scale for x in p.a), tuple(x * scale for x in p.b)) for p in night[:wanted]]

    # the pairs measured for one cell serve the other (measured), as the night's boot pairs measure every case
    paired = InTurn(measure, measured=lambda a: len(booted))
    opened = _judge(case, tonight, paired=paired, pairs=GPU_RULES)  # type: ignore[arg-type]
    failed = {o.cell: o for o in opened if o.status == Status.FAIL and o.confirmation is not None}
    assert "tg32" in failed and (not prefill or "pp128" in failed), [(o.cell, o.reason) for o in opened]
    return {cell: o.confirmation.mean_ratio for cell, o in failed.items() if o.confirmation is not None}


def test_a_step_between_tonights_two_builds_is_booted_again_up_to_the_setting_then_left_undecided(
    tmp_path: Path,
) -> None:
    """A step whose one boot lies halfway (in log) between tonight's A and tonight's build weighs nothing either way:
    it is booted again (one boot, not a boot pair), up to culprit.step_boots boots, each fresh boot shared by every
    cell; still halfway after them it is INCONCLUSIVE, never guessed, and a bisection skips it. A second boot back at
    A's figure decides it good; with the setting at 1 no boot more is made."""
    slowdown = _night_failed_at(tmp_path, 0.75)["tg32"]
    halfway = math.sqrt(slowdown)
    found, asked = _trial_step(tmp_path, "halfway", halfway, {"tg32": slowdown}, again=(halfway, halfway), step_boots=3)
    between = found["tg32"]
    assert between.status == Status.INCONCLUSIVE and asked == [-1, -2], between.reason
    assert between.reason.endswith("neither like it nor like tonight's build after 3 boots"), between.reason
    failing = [Failing(cast(ModelEntry, SimpleNamespace(id="m")), "perf", {"tg32": slowdown}, frozenset())]
    outcome = Outcome("m", Status.INCONCLUSIVE, "perf", between.reason, True, 1.0)
    assert step_verdict(failing, [outcome])[0] == Status.SKIPPED

    found, asked = _trial_step(tmp_path, "back-at-a", halfway, {"tg32": slowdown}, again=(1.0, 1.0), step_boots=3)
    good = found["tg32"]
    assert good.status == Status.PASS and asked == [-1], good.reason
    assert "(2 boots) against tonight's" in good.reason and good.step_boots == 2
    assert ", 2 boots against tonight's " in headline(good), headline(good)

    found, asked = _trial_step(tmp_path, "one-boot-only", halfway, {"tg32": slowdown}, again=(1.0,), step_boots=1)
    assert found["tg32"].status == Status.INCONCLUSIVE and asked == [], found["tg32"].reason
    assert found["tg32"].reason.endswith("after one boot")


def test_two_cells_of_one_case_each_weigh_the_bench_boot_first_and_share_the_fresh_ones(tmp_path: Path) -> None:
    """Tonight FAILed decode and prefill of one case at 0.7x. The step's bench boot lies halfway on both, its first
    fresh boot at A's figures: each cell weighs the bench boot and that one fresh boot (2 boots, PASS), the fresh boot
    made once for both; neither cell counts the fresh boot as its first (which would decide it on one boot)."""
    slowdowns = _night_failed_at(tmp_path, 0.7, prefill=True)
    assert set(slowdowns) == {"tg32", "pp128"}, slowdowns
    halfway = math.sqrt(slowdowns["tg32"])
    found, asked = _trial_step(
        tmp_path, "both-halfway", halfway, dict(slowdowns), prefill=1 / math.sqrt(slowdowns["pp128"]),
        again=(1.0, 1.0), again_prefill=(1.0, 1.0), step_boots=3,
    )  # fmt: skip
    assert asked == [-1], asked
    assert {cell: (o.status, o.step_boots) for cell, o in found.items()} == {
        "tg32": (Status.PASS, 2),
        "pp128": (Status.PASS, 2),
    }, {cell: o.reason for cell, o in found.items()}


def test_a_step_with_no_boot_left_tonight_is_left_undecided_and_says_why(tmp_path: Path) -> None:
    slowdown = _night_failed_at(tmp_path, 0.75)["tg32"]
    halfway = math.sqrt(slowdown)
    found, asked = _trial_step(tmp_path, "no-budget", halfway, {"tg32": slowdown}, again=(1.0,), step_boots=3, budget=0)
    assert found["tg32"].status == Status.INCONCLUSIVE and asked == [], found["tg32"].reason
    assert found["tg32"].reason.endswith("after one boot; no boot left tonight"), found["tg32"].reason


def test_a_step_like_tonights_build_is_named_bad_in_one_boot_and_an_unchanged_one_good(tmp_path: Path) -> None:
    """The issue's GPU day: decode 27 % slower tonight. A step at tonight's build's figure FAILs and one at A's
    PASSes, each on its one boot, where the night's own rules asked two boot pairs and nearly ten minutes a step."""
    slowdown = _night_failed_at(tmp_path, 0.73)["tg32"]
    bad, bad_asked = _trial_step(tmp_path, "like-b", 0.73, {"tg32": slowdown}, again=(0.73,) * 2, step_boots=3)
    good, good_asked = _trial_step(tmp_path, "like-a", 1.0, {"tg32": slowdown}, again=(1.0,) * 2, step_boots=3)
    assert bad["tg32"].status == Status.FAIL and bad_asked == [], bad["tg32"].reason
    assert good["tg32"].status == Status.PASS and good_asked == [], good["tg32"].reason
    assert bad["tg32"].step_boots == good["tg32"].step_boots == 1


def test_the_gpu_days_lying_boot_fails_on_its_own_and_passes_when_tried_again_on_two(tmp_path: Path) -> None:
    """The GPU day of 2026-11-29, its figures (tg32 at batch 4): tonight's pairs FAILed the build at 0.61x; the 6th
    commit (good) booted once at 0.66x of tonight's A, every cell of that boot slow, and one boot FAILed it, so the
    bisection named it. Tried again as a boundary step (least_boots 2), its first look's boot is weighed with the
    second look's, which measures as the sitting's good boots did (0.955x): the two boots' mean decides it good, if
    only just (log-likelihood ratio -3.17, PASS at -2.94), with one boot more, not two; had it not, a third (0.875x,
    the first night's boot of A against tonight's) was there to buy."""
    slowdown = _night_failed_at(tmp_path, 0.6062)["tg32"]
    lied, asked = _trial_step(tmp_path, "one-look", 0.6608, {"tg32": slowdown}, again=(0.955, 0.875), step_boots=3)
    assert lied["tg32"].status == Status.FAIL and lied["tg32"].step_boots == 1 and asked == [], lied["tg32"].reason
    first_look = lied["tg32"].step_logs
    again, asked = _trial_step(
        tmp_path, "again", 0.955, {"tg32": slowdown}, again=(0.875,), step_boots=3, least_boots=2, earlier=(0.6608,)
    )
    assert again["tg32"].status == Status.PASS and asked == [], again["tg32"].reason
    assert again["tg32"].step_boots == 2 and "(2 boots, 1 of its first look) against tonight's" in again["tg32"].reason
    assert again["tg32"].step_logs[0] == pytest.approx(first_look[0])
    assert cell_numbers(again["tg32"])["step_boots"] == 2 and len(cell_numbers(again["tg32"])["step_logs"]) == 2


def test_least_boots_never_exceed_the_setting_and_a_clear_step_still_takes_them(tmp_path: Path) -> None:
    """A boundary step like tonight's build is still bad on two boots (one fresh boot more, not a pair); with
    culprit.step_boots at 1 nothing more is booted, the second look being a trial of its own."""
    slowdown = _night_failed_at(tmp_path, 0.73)["tg32"]
    bad, asked = _trial_step(
        tmp_path, "like-b", 0.73, {"tg32": slowdown}, again=(0.73,) * 2, step_boots=3, least_boots=2
    )
    assert bad["tg32"].status == Status.FAIL and bad["tg32"].step_boots == 2 and asked == [-1], bad["tg32"].reason
    one, asked = _trial_step(tmp_path, "one", 0.73, {"tg32": slowdown}, again=(0.73,), step_boots=1, least_boots=2)
    assert one["tg32"].status == Status.FAIL and one["tg32"].step_boots == 1 and asked == [], one["tg32"].reason
