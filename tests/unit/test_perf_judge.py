"""The performance judgement flow with recorded measurements: health, screening, rerun, paired confirmation, history."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from pathlib import Path

import pytest

from pipeline.config.matrix import Cell
from pipeline.config.thresholds import Level, PairRules, Reference, Thresholds, blocked_boots
from pipeline.detect.steps import Confirmation
from pipeline.infra.confirmed import BuildRef, ConfirmedBook, LastConfirmed
from pipeline.infra.history import History
from pipeline.stages.prove.health import HealthReport, HostFacts
from pipeline.stages.prove.perf import pairs
from pipeline.stages.prove.perf.gate import CellVerdict, judge_cell
from pipeline.stages.prove.perf.judge import BootAgain, PerfContext, Remeasure, judge_results
from pipeline.stages.prove.perf.measure import CaseResult, RequestSample, RunSample
from pipeline.stages.prove.perf.paired import CellOutcome, PairedMeasure, PairsOverBoots, paired_verdict, side_by_side
from pipeline.stages.prove.perf.run import JudgedPerf
from pipeline.stages.prove.perf.verdict import perf_verdict
from pipeline.status import Status

PP, TG = Cell("pp128", "pp", 128, 32, 0, 1), Cell("tg32", "tg", 128, 32, 0, 1)
FACTS = HostFacts(2, 0.0, (), None, (), "none")
HEALTHY = HealthReport(True, (), FACTS)
SICK = HealthReport(False, ("processes that are not ours use 0.50 of each core (max 0.25): 42 (hog) 100%",), FACTS)


def _case(tg_tps: float, runs: int = 3) -> CaseResult:
    tokens = 33
    span = (tokens - 1) / tg_tps
    times = tuple(1.0 + i * span / (tokens - 1) for i in range(tokens))
    sample = RequestSample(128, tokens, 0.3, 0.31, 0.25, times[0], times[-1], times)
    return CaseResult(PP, TG, tuple(RunSample((sample,)) for _ in range(runs)), client_generated_tokens=runs * tokens)


DEFAULT_PAIRS = PairRules()


def _thresholds(pairs: PairRules = DEFAULT_PAIRS) -> Thresholds:
    def ref(cell: str, metric: str, value: float) -> Reference:
        return Reference(cell, metric, value, "t/s", Level.parse("-35%"), Level.parse("-60%"))

    cells = {"pp128": ref("pp128", "pp_tps", 512.0), "tg32": ref("tg32", "tg_tps", 20.0)}
    return Thresholds("cpu-x86", "m", cells, pairs=pairs)


def _build(name: str) -> BuildRef:
    return BuildRef(f"runtime-{name}", "runtime", f"/runtimes/{name}", "0" * 64, night=name)


def _ctx(tmp_path: Path, night: str = "2026-11-20", build: str | None = None) -> PerfContext:
    """A night on build `build` (the night's own by default: upstream moves every night)."""
    return PerfContext(
        History(tmp_path / "h.sqlite"),
        "cpu-x86",
        "host",
        "m",
        f"run-{night}",
        night,
        {},
        build=_build(build or night),
        book=ConfirmedBook(tmp_path / "confirmed.json"),
    )


def _judge(
    case: CaseResult,
    ctx: PerfContext,
    *,
    health_after: HealthReport = HEALTHY,
    remeasure: Remeasure = lambda r: r,
    paired: PairedMeasure = lambda r, m, n, a: None,
    pairs: PairRules = DEFAULT_PAIRS,
    another_build: str | None = None,
    boot_again: BootAgain | None = None,
) -> list[CellOutcome]:
    return judge_results(
        [case],
        replace(_thresholds(pairs), another_build=another_build),
        ctx,
        health_before=HEALTHY,
        health_after=health_after,
        remeasure=remeasure,
        paired=paired,
        boot_again=boot_again,
    )


def _seed(ctx: PerfContext, tmp_path: Path, tg_tps: float, nights: int = 8) -> None:
    for index in range(nights):
        _judge(_case(tg_tps * (1 + 0.01 * (index % 3 - 1))), _ctx(tmp_path, f"2026-11-{index + 1:02d}"))


def test_an_unhealthy_host_makes_every_cell_inconclusive_and_keeps_nothing(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    outcomes = _judge(_case(5.0), ctx, health_after=SICK)
    assert {o.status for o in outcomes} == {Status.INCONCLUSIVE}
    assert "42 (hog)" in outcomes[0].reason
    assert ctx.history.nights(hardware="cpu-x86", entry="m", cell="tg32", metric="tg_tps") == []


def test_a_steady_night_passes_and_is_recorded(tmp_path: Path) -> None:
    _seed(_ctx(tmp_path), tmp_path, 20.0)
    ctx = _ctx(tmp_path)
    outcomes = _judge(_case(20.0), ctx)
    assert [o.status for o in outcomes] == [Status.PASS, Status.PASS]
    assert len(ctx.history.nights(hardware="cpu-x86", entry="m", cell="tg32", metric="tg_tps", limit=100)) == 9


def test_a_trip_that_does_not_survive_the_rerun_passes_and_the_entry_says_which_cell_was_measured_again(
    tmp_path: Path,
) -> None:
    _seed(_ctx(tmp_path), tmp_path, 20.0)
    outcomes = _judge(_case(18.0), _ctx(tmp_path), remeasure=lambda r: _case(20.0))
    decode = next(o for o in outcomes if o.cell == "tg32")
    assert decode.status == Status.PASS and "passed on rerun" in decode.reason
    verdict = perf_verdict("m", JudgedPerf([], HEALTHY, outcomes), HEALTHY)
    assert verdict.reason == "2 cells within their references (tg32 tripped, and passed measured again)"
    tg32, pp128 = verdict.cells["tg32"], verdict.cells["pp128"]
    assert (tg32["value"], tg32["rerun_value"]) == (18.0, 20.0) and tg32["reason"] == decode.reason
    assert "rerun_value" not in pp128 and "vs median of 8 nights" in pp128["reason"]  # a clean cell says why too


def test_a_confirmed_slowdown_fails_and_an_unconfirmed_one_is_inconclusive(tmp_path: Path) -> None:
    _seed(_ctx(tmp_path), tmp_path, 20.0)
    slow = [(20.0 * (1 + d), 18.0 * (1 + d)) for d in (0.0, 0.004, -0.003, 0.002, -0.001, 0.003, 0.0, -0.002)]
    failed = _judge(_case(18.0), _ctx(tmp_path), remeasure=lambda r: _case(18.0), paired=lambda r, m, n, a: slow)
    decode = next(o for o in failed if o.cell == "tg32")
    assert decode.status == Status.FAIL and decode.confirmation is not None
    assert decode.confirmation.mean_ratio < 0.91
    fresh = tmp_path / "fresh"  # the same slowdown where no regression is open, and no pairs to confirm it
    fresh.mkdir()
    _seed(_ctx(fresh), fresh, 20.0)
    unconfirmed = _judge(_case(18.0), _ctx(fresh, "2026-11-21"), remeasure=lambda r: _case(18.0))
    assert next(o for o in unconfirmed if o.cell == "tg32").status == Status.INCONCLUSIVE
    # where the confirmed regression is open, the next night still as slow stays FAILed without pairs
    after = _judge(_case(18.0), _ctx(tmp_path, "2026-11-21"), remeasure=lambda r: _case(18.0))
    still = next(o for o in after if o.cell == "tg32")
    assert still.status == Status.FAIL and "a regression is open since 2026-11-20" in still.reason


def test_far_past_the_fixed_reference_fails_without_a_pair(tmp_path: Path) -> None:
    outcomes = _judge(_case(5.0), _ctx(tmp_path), remeasure=lambda r: _case(5.0))
    decode = next(o for o in outcomes if o.cell == "tg32")
    assert decode.status == Status.FAIL and "past the fail level" in decode.reason


def test_without_a_pair_a_step_that_persists_in_the_history_fails(tmp_path: Path) -> None:
    _seed(_ctx(tmp_path), tmp_path, 20.0, nights=21)  # a steady baseline
    decodes = []
    for index in range(6):  # then six nights at -12 %, each tripping twice with no last good build to pair with
        night = f"2026-12-{index + 1:02d}"
        outcomes = _judge(_case(17.6), _ctx(tmp_path, night), remeasure=lambda r: _case(17.6))
        decodes.append(next(o for o in outcomes if o.cell == "tg32"))
    first = next(i for i, d in enumerate(decodes) if d.status == Status.FAIL)
    assert "the history shows a step" in decodes[first].reason
    for later in decodes[first + 1 :]:  # the regression stays FAILed while it lasts, with no pairs to decide it
        assert later.status == Status.FAIL and "a regression is open since 2026-12-" in later.reason
        assert "still regressed" in later.reason


COMMUNITY = "the community's patched image, vLLM 0.18.3.dev, 2026-03-31"


def test_off_another_builds_reference_with_no_night_of_its_own_a_cell_reports_a_gap_and_becomes_the_first(
    tmp_path: Path,
) -> None:
    ctx = _ctx(tmp_path, "2026-11-01")
    outcomes = _judge(_case(5.0), ctx, remeasure=lambda r: _case(5.0), another_build=COMMUNITY)
    decode = next(o for o in outcomes if o.cell == "tg32")
    assert decode.status == Status.PASS and decode.gap is not None
    assert decode.reason.startswith("gap, not a regression: 5 t/s vs 20")
    assert decode.gap == f"-75.0% against a reference measured on another build ({COMMUNITY})"
    assert _a_of(ctx) == "runtime-2026-11-01"  # the pipeline's own night is the baseline from now on


def test_once_a_cell_has_nights_of_its_own_they_replace_another_builds_reference(tmp_path: Path) -> None:
    """The gap is reported once; from then on the pipeline's own accepted nights are the yardstick, with the file's
    levels: the same speed again passes with no gap, and a night far below the pipeline's own FAILs."""
    _judge(_case(5.0), _ctx(tmp_path, "2026-11-01"), remeasure=lambda r: _case(5.0), another_build=COMMUNITY)
    again = _judge(_case(5.0), _ctx(tmp_path, "2026-11-02"), another_build=COMMUNITY)
    decode = next(o for o in again if o.cell == "tg32")
    assert decode.status == Status.PASS and decode.gap is None
    assert "vs 5 (this host's 1 accepted night: 5 t/s; the file's 20 was measured on another build)" in decode.reason
    worse = _judge(_case(1.5), _ctx(tmp_path, "2026-11-03"), remeasure=lambda r: _case(1.5), another_build=COMMUNITY)
    decode = next(o for o in worse if o.cell == "tg32")
    assert decode.gap is None and decode.status == Status.FAIL  # A could not be served here: the fixed level
    assert "past the fail level" in decode.reason and "this host's 2 accepted nights: 5 t/s" in decode.reason


SLOW_PAIRS = [(20.0 * (1 + d), 18.0 * (1 + d)) for d in (0.0, 0.004, -0.003, 0.002, -0.001, 0.003, 0.0, -0.002)]
EVEN_PAIRS = [(20.0 * (1 + d), 20.0 * (1 - d)) for d in (0.0, 0.002, -0.001, 0.001, -0.002, 0.0, 0.001, -0.001)]


def _a_of(ctx: PerfContext) -> str | None:
    assert ctx.book is not None
    found = ctx.book.last_good(ctx.series("tg32", "tg_tps"))
    return found.build.id if found else None


def _accepted_nights(ctx: PerfContext) -> list[str]:
    nights = ctx.history.nights(hardware="cpu-x86", entry="m", cell="tg32", metric="tg_tps", accepted_only=True)
    return [n.night for n in nights]


def test_the_very_first_night_says_it_has_no_confirmed_build_and_becomes_the_first(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, "2026-11-01")
    decode = next(o for o in _judge(_case(20.0), ctx) if o.cell == "tg32")
    assert decode.status == Status.PASS and "no confirmed build yet, tonight's becomes the first" in decode.reason
    assert _a_of(ctx) == "runtime-2026-11-01"


def test_a_moves_only_when_tonight_is_accepted_and_a_failed_night_never_joins_the_baseline(tmp_path: Path) -> None:
    _seed(_ctx(tmp_path), tmp_path, 20.0)
    assert _a_of(_ctx(tmp_path)) == "runtime-2026-11-01"  # the first night's; clean screens never move an A
    failed = _ctx(tmp_path, "2026-11-20")
    seen: list[str] = []

    def pairs_against(result: CaseResult, metric: str, wanted: int, a: BuildRef) -> list[tuple[float, float]]:
        seen.append(a.id)
        return SLOW_PAIRS

    outcomes = _judge(_case(18.0), failed, remeasure=lambda r: _case(18.0), paired=pairs_against)
    decode = next(o for o in outcomes if o.cell == "tg32")
    assert decode.status == Status.FAIL and seen and set(seen) == {"runtime-2026-11-01"}
    assert "B/A 0.9000" in decode.reason and "runtime runtime-2026-11-01 of 2026-11-01" in decode.reason
    assert _a_of(failed) == "runtime-2026-11-01"  # a failed build never becomes A
    assert "2026-11-20" not in _accepted_nights(failed)  # nor part of the baseline
    all_nights = failed.history.nights(hardware="cpu-x86", entry="m", cell="tg32", metric="tg_tps")
    assert all_nights[-1].night == "2026-11-20" and all_nights[-1].verdict == "FAIL"  # but it is kept, with its verdict
    lucky = _ctx(tmp_path, "2026-11-21")  # the regressed build on a good night: a clean screen cannot pass it
    seen.clear()
    decode = next(o for o in _judge(_case(20.0), lucky, paired=pairs_against) if o.cell == "tg32")
    assert decode.status == Status.FAIL and seen and "a regression is open since 2026-11-20" in decode.reason
    recovered = _ctx(tmp_path, "2026-11-22")  # fixed: the pairs pass it, and only then does A move
    decode = next(o for o in _judge(_case(20.0), recovered, paired=lambda r, m, n, a: EVEN_PAIRS) if o.cell == "tg32")
    assert decode.status == Status.PASS and decode.confirmation is not None
    assert _a_of(recovered) == "runtime-2026-11-22" and "2026-11-22" in _accepted_nights(recovered)


def test_a_dip_that_the_pairs_clear_passes_and_moves_a(tmp_path: Path) -> None:
    _seed(_ctx(tmp_path), tmp_path, 20.0)
    ctx = _ctx(tmp_path, "2026-11-20")
    outcomes = _judge(_case(17.0), ctx, remeasure=lambda r: _case(17.0), paired=lambda r, m, n, a: EVEN_PAIRS)
    decode = next(o for o in outcomes if o.cell == "tg32")
    assert decode.status == Status.PASS and decode.confirmation is not None and decode.pairs_measured == 8
    assert _a_of(ctx) == "runtime-2026-11-20"


def test_past_the_fail_level_with_an_a_on_hand_the_pairs_decide(tmp_path: Path) -> None:
    _seed(_ctx(tmp_path), tmp_path, 20.0)
    ctx = _ctx(tmp_path, "2026-11-20")
    outcomes = _judge(_case(7.0), ctx, remeasure=lambda r: _case(7.0), paired=lambda r, m, n, a: EVEN_PAIRS)
    decode = next(o for o in outcomes if o.cell == "tg32")
    assert decode.gate.status == "FAIL" and decode.status == Status.PASS  # a night that hit the whole host, A too


def test_an_unchanged_build_that_trips_is_inconclusive_not_blamed(tmp_path: Path) -> None:
    _seed(_ctx(tmp_path), tmp_path, 20.0)
    ctx = _ctx(tmp_path, "2026-11-20", build="2026-11-01")  # tonight's build is A itself

    def never(result: CaseResult, metric: str, wanted: int, a: BuildRef) -> None:
        raise AssertionError("pairs of a build with itself were measured")

    decode = next(
        o for o in _judge(_case(17.0), ctx, remeasure=lambda r: _case(17.0), paired=never) if o.cell == "tg32"
    )
    assert decode.status == Status.INCONCLUSIVE and "the last confirmed build itself" in decode.reason


def test_an_unchanged_build_side_by_side_is_measured_again_on_a_fresh_boot_not_its_slow_one(tmp_path: Path) -> None:
    """Boots of one build spread by 10 % and more on a 2-core host (tg32 24-31 t/s over five boots): a rerun on the
    boot that tripped measured that boot again, and the container path's night of the last confirmed build ended
    INCONCLUSIVE (23.8 t/s against the host's one night of 31.3, tripped twice on one boot)."""
    _seed(_ctx(tmp_path), tmp_path, 20.0)
    fresh_boots: list[int] = []

    def fresh(value: float) -> BootAgain:
        def boot(result: CaseResult, number: int) -> CaseResult:
            fresh_boots.append(number)
            return _case(value)

        return boot

    def same_boot(result: CaseResult) -> CaseResult:
        raise AssertionError("the boot that tripped was measured again")

    def never(result: CaseResult, metric: str, wanted: int, a: BuildRef) -> None:
        raise AssertionError("pairs of a build with itself were measured")

    itself = replace(_ctx(tmp_path, "2026-11-20", build="2026-11-01"), record=False)  # tonight's build is A itself
    back = _judge(_case(15.0), itself, remeasure=same_boot, paired=never, boot_again=fresh(20.0))
    decode = next(o for o in back if o.cell == "tg32")
    assert decode.status == Status.PASS and fresh_boots == [1]
    assert "passed on a fresh boot" in decode.reason and "the last confirmed build itself" in decode.reason
    fresh_boots.clear()
    slow = _judge(_case(15.0), itself, remeasure=same_boot, paired=never, boot_again=fresh(15.0))
    decode = next(o for o in slow if o.cell == "tg32")
    assert decode.status == Status.INCONCLUSIVE and fresh_boots == [1]
    assert "tripped twice, the second time on a fresh boot" in decode.reason
    assert "points at the host or the night" in decode.reason
    fresh_boots.clear()  # another build: rerun on its own boot, then pairs against A decide (they boot both again)
    changed = replace(_ctx(tmp_path, "2026-11-20"), record=False)
    other = _judge(_case(15.0), changed, remeasure=lambda r: _case(15.0), paired=lambda r, m, n, a: EVEN_PAIRS,
                   boot_again=fresh(20.0))  # fmt: skip
    decode = next(o for o in other if o.cell == "tg32")
    assert fresh_boots == [] and decode.confirmation is not None
    assert "tripped twice, the second time on rerun" in decode.reason


def test_the_hardwares_boot_spread_keeps_two_processes_a_few_percent_apart_from_a_fail(tmp_path: Path) -> None:
    # Pairs of two processes 3 % apart, tight within themselves: the CPU profile's pairs as CI once measured them.
    apart = [(20.0, 20.0 * math.exp(x)) for x in (-0.025, -0.040, -0.030, -0.035, -0.028, -0.038, -0.027, -0.033)]

    def night(folder: Path, pairs: PairRules) -> CellOutcome:
        folder.mkdir()
        _seed(_ctx(folder), folder, 20.0)
        outcomes = _judge(
            _case(17.0),
            _ctx(folder, "2026-11-20"),
            remeasure=lambda r: _case(17.0),
            paired=lambda r, m, wanted, a: (apart * 2)[:wanted],
            pairs=pairs,
        )
        return next(o for o in outcomes if o.cell == "tg32")

    assert night(tmp_path / "alone", PairRules()).status == Status.FAIL  # the pairs' own error only, as before
    decode = night(tmp_path / "counted", PairRules(min_effect=0.06, boot_sd=0.02))
    assert decode.status == Status.INCONCLUSIVE and decode.pairs_measured == 16
    assert decode.confirmation is not None and decode.confirmation.boot_sd == 0.02
    assert "boot-to-boot SD of 2.0%" in decode.reason


def test_pairs_that_cannot_decide_are_extended_once_then_inconclusive(tmp_path: Path) -> None:
    _seed(_ctx(tmp_path), tmp_path, 20.0)
    asked: list[int] = []
    wide = [(20.0, 20.0 * f) for f in (0.9, 1.08, 0.95, 1.04, 0.92, 1.06, 0.97, 1.0)]

    def noisy(result: CaseResult, metric: str, wanted: int, a: BuildRef) -> list[tuple[float, float]]:
        asked.append(wanted)
        return (wide * 2)[:wanted]

    ctx = _ctx(tmp_path, "2026-11-20")
    decode = next(
        o for o in _judge(_case(17.0), ctx, remeasure=lambda r: _case(17.0), paired=noisy) if o.cell == "tg32"
    )
    assert asked[:2] == [8, 16] and decode.status == Status.INCONCLUSIVE and decode.pairs_measured == 16
    assert _a_of(ctx) == "runtime-2026-11-01"


def runs_by_client(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every run the pairs measure, faked: the client named "A" decodes at twice the others' rate. The clients
    measured, in order, are appended to the list returned."""
    order: list[str] = []

    def fake_run(client: object, model: str, case: object, *, prompts: object, latency_s: float) -> RunSample:
        order.append(str(client))
        tokens = 33 if client == "A" else 17  # B decodes at half A's rate over the same span
        times = tuple(1.0 + i / (tokens - 1) for i in range(tokens))  # one second of decoding
        return RunSample((RequestSample(128, tokens, 0.3, 0.31, 0.25, times[0], times[-1], times),))

    monkeypatch.setattr(pairs, "measure_run", fake_run)
    monkeypatch.setattr(pairs, "PromptMaker", lambda client, model: None)
    monkeypatch.setattr(pairs, "latency_estimate", lambda client: 0.0)
    return order


def test_pairs_alternate_a_b_then_b_a_and_the_later_boot_changes_sides_block_by_block(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    order = runs_by_client(monkeypatch)
    watched: list[str] = []
    boots: list[str] = []

    @contextmanager
    def watch() -> Iterator[None]:
        watched.append("start")
        yield
        watched.append("end")

    def again_a(build: BuildRef) -> object:
        boots.append("A")
        return "A"

    def again_b(why: str) -> object:
        boots.append("B")
        return "B2"

    beside = pairs.Beside(lambda build: "A", again_a, lambda: "B", again_b)  # type: ignore[arg-type,return-value]
    measure = pairs.interleaved_pairs(beside, "m", watch=watch, say=lambda line: None)
    measured = measure(_case(20.0), "tg_tps", 3, _build("a"))
    assert order == ["A", "B", "A", "B", "A", "B", "B", "A", "A", "B"]  # warm-ups, then A B / B A / A B
    assert measured is not None and len(measured.values) == 3
    assert all(b / a == pytest.approx(0.5) for a, b in measured.values)  # always (A, B)
    order.clear()
    more = measure(_case(20.0), "tg_tps", 8, _build("a"))
    # pair 4 ends the first block (B booted first, A later); before the second, tonight's build is booted again
    # after A and warmed up twice, its pairs going on in the same A B / B A order
    assert boots == ["B"]
    assert order == ["B", "A", "B2", "B2", "A", "B2", "B2", "A", "A", "B2", "B2", "A"]
    assert more is not None and more.values[:3] == measured.values  # reused, the order goes on
    order.clear()
    assert measure(_case(20.0), "pp_tps", 8, _build("a")) is not None and order == []  # the case's other cell
    third = measure(_case(20.0), "tg_tps", 12, _build("a"))
    assert boots == ["B", "A"]  # the third block: now A, booted earlier than B2, is booted again
    # each pair names the boots it measured, as the pair rules count them
    assert third is not None and third.boots == [(0, 0)] * 4 + [(0, 1)] * 4 + [(1, 1)] * 4 == blocked_boots(12)
    assert watched == ["start", "end"] * 4  # one window per block measured, none when nothing is


def test_pairs_beside_a_server_given_by_url_keep_their_boots_and_say_so(monkeypatch: pytest.MonkeyPatch) -> None:
    order = runs_by_client(monkeypatch)
    said: list[str] = []

    def never(build: BuildRef) -> object:
        raise AssertionError("A was booted again though B cannot be")

    beside = pairs.Beside(lambda build: "A", never, lambda: "B", None)  # type: ignore[arg-type]
    measure = pairs.interleaved_pairs(beside, "m", watch=nullcontext, say=said.append)
    assert measure(_case(20.0), "tg_tps", 8, _build("a")) is not None
    assert order[4:] == ["A", "B", "B", "A"] * 4
    assert said == ["m: tonight's server is not ours to boot again: the boots' order is not swapped"]


def test_a_failed_cell_back_on_its_confirmed_build_passes_without_pairing_the_build_with_itself(
    tmp_path: Path,
) -> None:
    _seed(_ctx(tmp_path), tmp_path, 20.0)
    _judge(
        _case(18.0), _ctx(tmp_path, "2026-11-20"), remeasure=lambda r: _case(18.0), paired=lambda r, m, n, a: SLOW_PAIRS
    )

    def never(result: CaseResult, metric: str, wanted: int, a: BuildRef) -> None:
        raise AssertionError("pairs of a build with itself were measured")

    back = _ctx(tmp_path, "2026-11-21", build="2026-11-01")  # the regressed build reverted: A itself again
    decode = next(o for o in _judge(_case(20.0), back, paired=never) if o.cell == "tg32")
    assert decode.status == Status.PASS


NOISY_PAIRS = [(20.0, 20.0 * (1 + d)) for d in (-0.05, 0.04, -0.03, 0.02, -0.04, 0.03, -0.02, 0.01)]


def test_an_open_regression_survives_undecided_nights_and_closes_only_on_a_persistent_recovery(
    tmp_path: Path,
) -> None:
    """FAIL, then a night whose pairs cannot decide, then clean nights with no A to serve: the old one-night guard
    let the first clean screen close the alert and put the regressed build's night in the baseline (it flapped)."""
    _seed(_ctx(tmp_path), tmp_path, 20.0)
    failed = _judge(_case(18.0), _ctx(tmp_path, "2026-11-20"), remeasure=lambda r: _case(18.0),
                    paired=lambda r, m, n, a: SLOW_PAIRS)  # fmt: skip
    assert next(o for o in failed if o.cell == "tg32").status == Status.FAIL
    undecided = _judge(_case(20.0), _ctx(tmp_path, "2026-11-21"), paired=lambda r, m, n, a: NOISY_PAIRS)
    assert next(o for o in undecided if o.cell == "tg32").status == Status.INCONCLUSIVE
    verdicts = []
    for night in ("2026-11-22", "2026-11-23"):  # clean again, and A cannot be served
        decode = next(o for o in _judge(_case(20.0), _ctx(tmp_path, night)) if o.cell == "tg32")
        verdicts.append((decode.status, decode.reason))
    assert [status for status, _ in verdicts] == [Status.INCONCLUSIVE, Status.PASS]
    assert all("a regression is open since 2026-11-20" in reason for _, reason in verdicts)
    assert "still open: 2 of 3 nights in a row" in verdicts[0][1] and "recovered: 3 nights in a row" in verdicts[1][1]
    accepted = _accepted_nights(_ctx(tmp_path))
    assert not {"2026-11-20", "2026-11-21", "2026-11-22"} & set(accepted) and "2026-11-23" in accepted


def test_an_open_regression_is_paired_again_on_its_seventh_night_so_a_fixed_build_on_a_slower_host_clears(
    tmp_path: Path,
) -> None:
    """A fixed build on a host that became slower trips every night against the accepted nights: only pairs can
    clear it, so every REPAIR_EVERY_NIGHTS-th night of an open regression pairs even when tonight still trips."""
    _seed(_ctx(tmp_path), tmp_path, 20.0)
    _judge(
        _case(18.0), _ctx(tmp_path, "2026-11-20"), remeasure=lambda r: _case(18.0), paired=lambda r, m, n, a: SLOW_PAIRS
    )
    asked: list[str] = []

    def even(result: CaseResult, metric: str, wanted: int, a: BuildRef) -> list[tuple[float, float]]:
        asked.append(metric)
        return EVEN_PAIRS

    verdicts = []
    for day in range(21, 28):  # the host is 10 % slower from now on, the build fixed (B/A 1 in pairs)
        outcome = next(
            o for o in _judge(_case(18.0), _ctx(tmp_path, f"2026-11-{day}"), paired=even) if o.cell == "tg32"
        )
        verdicts.append(outcome.status)
    assert verdicts == [Status.FAIL] * 6 + [Status.PASS] and asked  # paired on the regression's 7th night only
    assert "a regression is open since 2026-11-20" in outcome.reason and outcome.confirmation is not None


def test_an_open_regression_that_still_trips_stays_failed_without_booting_a(tmp_path: Path) -> None:
    """Pairs cost boots on a host that holds one server: a night still below the accepted nights needs none."""
    _seed(_ctx(tmp_path), tmp_path, 20.0)
    _judge(
        _case(18.0), _ctx(tmp_path, "2026-11-20"), remeasure=lambda r: _case(18.0), paired=lambda r, m, n, a: SLOW_PAIRS
    )

    def never(result: CaseResult, metric: str, wanted: int, a: BuildRef) -> None:
        raise AssertionError("pairs were measured for a night that still trips")

    decode = next(o for o in _judge(_case(18.0), _ctx(tmp_path, "2026-11-21"), paired=never) if o.cell == "tg32")
    assert decode.status == Status.FAIL and decode.pairs_measured == 0
    assert "a regression is open since 2026-11-20; still regressed" in decode.reason, decode.reason


def test_a_regression_on_a_cells_first_night_recovers_on_its_fixed_reference_before_there_is_a_history(
    tmp_path: Path,
) -> None:
    """No confirmed build and fewer than 5 accepted nights: the screen cannot speak, so three nights in a row back
    within the fixed reference close it (a screen that always trips on a short history would keep it open forever)."""
    first = _judge(_case(5.0), _ctx(tmp_path, "2026-11-01"), remeasure=lambda r: _case(5.0))
    assert next(o for o in first if o.cell == "tg32").status == Status.FAIL  # past the fixed fail level
    statuses = [
        next(o for o in _judge(_case(20.0), _ctx(tmp_path, night)) if o.cell == "tg32").status
        for night in ("2026-11-02", "2026-11-03", "2026-11-04")
    ]
    assert statuses == [Status.INCONCLUSIVE, Status.INCONCLUSIVE, Status.PASS]


# Hosts at half, the same and twice the speed of the one the file's tg32 reference (20 t/s) was measured on.
HOST_SPEEDS = (0.5, 1.0, 2.0)


def _pairs_at(ratio: float, level: float) -> list[tuple[float, float]]:
    """Eight interleaved (A, B) pairs with B at `ratio` of A, A at `level`, and a little noise."""
    return [(level * (1 + d), level * ratio * (1 - d)) for d in (0.0, 0.004, -0.003, 0.002, -0.001, 0.003, 0.0, -0.002)]


@pytest.mark.parametrize("speed", HOST_SPEEDS)
def test_a_hosts_good_first_and_second_nights_pass_whatever_its_speed(tmp_path: Path, speed: float) -> None:
    host = 20.0 * speed
    first = next(o for o in _judge(_case(host), _ctx(tmp_path, "2026-11-01")) if o.cell == "tg32")
    assert first.status == Status.PASS, first.reason
    if speed < 1:  # past the file's warn level (-35 %), above its fail level (-60 %): a slow host, not a slow build
        assert first.gap is not None and "a slow host is not a slow build" in first.reason
    second_ctx = _ctx(tmp_path, "2026-11-02")
    second = next(o for o in _judge(_case(host * 0.98), second_ctx) if o.cell == "tg32")
    assert second.status == Status.PASS and second.gap is None, second.reason
    assert f"vs {host:.4g} (this host's 1 accepted night: {host:.4g} t/s" in second.reason
    assert _accepted_nights(second_ctx) == ["2026-11-01", "2026-11-02"]


@pytest.mark.parametrize("speed", HOST_SPEEDS)
def test_a_build_30_percent_slower_than_the_hosts_first_night_fails_on_the_second_by_pairs(
    tmp_path: Path, speed: float
) -> None:
    host = 20.0 * speed
    _judge(_case(host), _ctx(tmp_path, "2026-11-01"))
    seen: list[str] = []

    def pairs_against(result: CaseResult, metric: str, wanted: int, a: BuildRef) -> list[tuple[float, float]]:
        seen.append(a.id)
        return _pairs_at(0.7, host)

    ctx = _ctx(tmp_path, "2026-11-02")
    slow = _case(host * 0.7)
    decode = next(o for o in _judge(slow, ctx, remeasure=lambda r: slow, paired=pairs_against) if o.cell == "tg32")
    assert decode.status == Status.FAIL and decode.confirmation is not None, decode.reason
    assert set(seen) == {"runtime-2026-11-01"}  # paired with the host's first night's build
    assert decode.confirmation.mean_ratio == pytest.approx(0.7, abs=0.01)
    assert f"this host's 1 accepted night: {host:.4g} t/s" in decode.reason  # which reference judged it
    assert _a_of(ctx) == "runtime-2026-11-01" and "2026-11-02" not in _accepted_nights(ctx)


def test_a_first_night_below_the_files_fail_level_fails(tmp_path: Path) -> None:
    decode = next(o for o in _judge(_case(7.0), _ctx(tmp_path), remeasure=lambda r: _case(7.0)) if o.cell == "tg32")
    assert decode.status == Status.FAIL and "past the fail level" in decode.reason
    assert "the file's reference" in decode.reason


def test_the_files_fail_level_stays_a_floor_on_a_slow_hosts_later_nights(tmp_path: Path) -> None:
    """A host at half the file's speed has its own yardstick (10 t/s) whose fail level is 4 t/s; a night at 7.5 t/s
    is only -25 % from it, but past the file's fail level (8 t/s): gross breakage, FAIL with no A to pair with."""
    _judge(_case(10.0), _ctx(tmp_path, "2026-11-01"))
    ctx = replace(_ctx(tmp_path, "2026-11-02"), book=ConfirmedBook(tmp_path / "no-a.json"))
    decode = next(o for o in _judge(_case(7.5), ctx, remeasure=lambda r: _case(7.5)) if o.cell == "tg32")
    assert decode.status == Status.FAIL, decode.reason
    assert "vs 20 (the file's reference, a floor on every host)" in decode.reason


def _slower_cell(cell: str, ratio: float, pairs: int, status: Status = Status.FAIL) -> CellOutcome:
    derivation = "screen tripped at -41.2% (floor 1.5%); yardstick: 3 accepted nights; " * 12  # the GPU's 2,000 chars
    shown = "280 t/s vs 683 (this host's 3 accepted nights: median) (-59.0%), below the fail level -15%"
    gate = CellVerdict(cell, "tg_tps", "t/s", "FAIL", 280.0, 683.0, None, None, 280.0 / 683.0 - 1, shown)
    confirmation = Confirmation(
        "FAIL", derivation, pairs, ratio, math.log(ratio), 0.05, ratio - 0.05, ratio + 0.05, 0.95, ratio + 0.03,
        0.001, -12.0, 1e-6, 0.13,
    )  # fmt: skip
    a = BuildRef("runtime-ab12", "runtime", "/runs/a", "0" * 64, night="2026-11-26")
    return CellOutcome(
        cell, "tg_tps", status, derivation, gate, confirmation=confirmation, last_good=a, pairs_measured=pairs,
        in_turn=True,
    )  # fmt: skip


def test_a_failing_entry_s_reason_is_one_short_line_per_cell_and_the_derivation_stays_in_the_cell() -> None:
    """The GPU's finding: the slower build's entry reason was about 2,000 characters, every cell's whole derivation
    in one line. Now it leads with one line per failing cell, under 200 characters for the entry."""
    outcomes = [
        _slower_cell("tg32 (c1)", 0.412, 2),
        _slower_cell("tg32 (c4)", 0.381, 2),
        replace(_slower_cell("pp128 (c4)", 0.638, 2), status=Status.INCONCLUSIVE, confirmation=None),
    ]
    verdict = perf_verdict("m", JudgedPerf([], HEALTHY, outcomes), HEALTHY)
    assert verdict.status == Status.FAIL
    reason = verdict.reason
    assert reason.startswith("tg32 (c1): 0.41x the last confirmed build over 2 boot pairs, FAIL; tg32 (c4): 0.38x")
    assert reason.endswith("; undecided: pp128 (c4)") and len(reason) < 200, reason
    first, _ = verdict.failures
    assert first.reason.startswith("tg32 (c1): 0.41x the last confirmed build over 2 boot pairs, FAIL; measured ")
    assert len(first.reason) < 200, first.reason  # the alert's row: the headline and tonight's figure
    assert verdict.cells["tg32 (c1)"]["reason"] == outcomes[0].reason  # the derivation, for the report
    many = [_slower_cell(f"tg{n} (c1)", 0.5, 3) for n in range(8)]
    crowded = perf_verdict("m", JudgedPerf([], HEALTHY, many), HEALTHY).reason
    assert len(crowded) <= 200 and crowded.endswith("(8 failing cells; each in the report)"), crowded


def test_side_by_side_pairs_go_on_while_undecided_up_to_the_hardwares_max_pairs() -> None:
    asked: list[int] = []

    def unchanged(result: CaseResult, metric: str, wanted: int, a: BuildRef) -> PairsOverBoots:
        asked.append(wanted)  # the same build on both sides, every pair alike: only the boots' offsets are unknown
        return PairsOverBoots([(100.0, 100.0)] * wanted, blocked_boots(wanted))

    # 8 pairs span three boots: their interval cannot rule out 7 % yet; 16 span five, and PASS
    found = side_by_side(unchanged, _case(20.0), "tg_tps", _build("a"), PairRules(0.07, 0.05, 64))
    assert found is not None and found[0].decision == "PASS" and asked == [8, 16] and len(found[1].values) == 16
    asked.clear()
    found = side_by_side(unchanged, _case(20.0), "tg_tps", _build("a"), PairRules(0.07, 0.05, 8))
    assert found is not None and found[0].decision == "INCONCLUSIVE" and asked == [8]  # the hardware's most
    # pairs of one boot pair (a server given by URL) cannot average boots: more of them are asked, then no more
    asked.clear()

    def one_boot_pair(result: CaseResult, metric: str, wanted: int, a: BuildRef) -> list[tuple[float, float]]:
        asked.append(wanted)
        return [(100.0, 100.0)] * wanted

    found = side_by_side(one_boot_pair, _case(20.0), "tg_tps", _build("a"), PairRules(0.07, 0.05, 24))
    assert found is not None and found[0].decision == "INCONCLUSIVE" and asked == [8, 16, 24]


def test_once_another_cell_fails_the_entry_side_by_side_pairs_are_not_extended() -> None:
    asked: list[int] = []

    def unchanged(result: CaseResult, metric: str, wanted: int, a: BuildRef) -> PairsOverBoots:
        asked.append(wanted)
        return PairsOverBoots([(100.0, 100.0)] * wanted, blocked_boots(wanted))

    rules = PairRules(0.07, 0.05, 64)
    gate = judge_cell(_thresholds().cells["pp128"], [400.0])
    base = CellOutcome("pp128", "pp_tps", Status.INCONCLUSIVE, "tripped", gate)
    a = LastConfirmed(_build("a"))
    alone = paired_verdict(base, a, _case(20.0), unchanged, rules=rules)
    assert alone.status == Status.PASS and asked == [8, 16]  # undecided at 8: more pairs, more boots
    asked.clear()
    # tg32 already FAILs the entry: the first 8 pairs decide what they can, and no boot is made for more
    after = paired_verdict(base, a, _case(20.0), unchanged, rules=rules, failed=("tg32",))
    assert after.status == Status.INCONCLUSIVE and asked == [8], after.reason
    assert after.reason.endswith("no pairs more for it: tg32 already FAILs the entry")
