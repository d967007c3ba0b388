"""The performance judgement flow with recorded measurements: health, screening, rerun, paired confirmation, history."""

from __future__ import annotations

from pathlib import Path

from pipeline.config.matrix import Cell
from pipeline.config.thresholds import Level, Reference, Thresholds
from pipeline.infra.history import History
from pipeline.stages.prove.health import HealthReport, HostFacts
from pipeline.stages.prove.perf import CaseResult, RequestSample, RunSample
from pipeline.stages.prove.perf_judge import CellOutcome, PairedMeasure, PerfContext, Remeasure, judge_results
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


def _thresholds() -> Thresholds:
    def ref(cell: str, metric: str, value: float) -> Reference:
        return Reference(cell, metric, value, "t/s", Level.parse("-35%"), Level.parse("-60%"))

    return Thresholds("cpu-x86", "m", {"pp128": ref("pp128", "pp_tps", 512.0), "tg32": ref("tg32", "tg_tps", 20.0)})


def _ctx(tmp_path: Path, night: str = "2026-11-20") -> PerfContext:
    return PerfContext(History(tmp_path / "h.sqlite"), "cpu-x86", "host", "m", f"run-{night}", night, {})


def _judge(
    case: CaseResult,
    ctx: PerfContext,
    *,
    health_after: HealthReport = HEALTHY,
    remeasure: Remeasure = lambda r: r,
    paired: PairedMeasure = lambda r, m, n: None,
) -> list[CellOutcome]:
    return judge_results(
        [case], _thresholds(), ctx, health_before=HEALTHY, health_after=health_after, remeasure=remeasure, paired=paired
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


def test_a_trip_that_does_not_survive_the_rerun_passes(tmp_path: Path) -> None:
    _seed(_ctx(tmp_path), tmp_path, 20.0)
    outcomes = _judge(_case(18.0), _ctx(tmp_path), remeasure=lambda r: _case(20.0))
    decode = next(o for o in outcomes if o.cell == "tg32")
    assert decode.status == Status.PASS and "passed on rerun" in decode.reason


def test_a_confirmed_slowdown_fails_and_an_unconfirmed_one_is_inconclusive(tmp_path: Path) -> None:
    _seed(_ctx(tmp_path), tmp_path, 20.0)
    slow = [(20.0 * (1 + d), 18.0 * (1 + d)) for d in (0.0, 0.004, -0.003, 0.002, -0.001, 0.003, 0.0, -0.002)]
    failed = _judge(_case(18.0), _ctx(tmp_path), remeasure=lambda r: _case(18.0), paired=lambda r, m, n: slow)
    decode = next(o for o in failed if o.cell == "tg32")
    assert decode.status == Status.FAIL and decode.confirmation is not None
    assert decode.confirmation.mean_ratio < 0.91
    unconfirmed = _judge(_case(18.0), _ctx(tmp_path, "2026-11-21"), remeasure=lambda r: _case(18.0))
    assert next(o for o in unconfirmed if o.cell == "tg32").status == Status.INCONCLUSIVE


def test_far_past_the_fixed_reference_fails_without_a_pair(tmp_path: Path) -> None:
    outcomes = _judge(_case(5.0), _ctx(tmp_path), remeasure=lambda r: _case(5.0))
    decode = next(o for o in outcomes if o.cell == "tg32")
    assert decode.status == Status.FAIL and "past the fail level" in decode.reason


def test_without_a_pair_a_step_that_persists_in_the_history_fails(tmp_path: Path) -> None:
    _seed(_ctx(tmp_path), tmp_path, 20.0, nights=21)  # a steady baseline
    for index in range(6):  # then six nights at -12 %, each tripping twice with no last good build to pair with
        night = f"2026-12-{index + 1:02d}"
        outcomes = _judge(_case(17.6), _ctx(tmp_path, night), remeasure=lambda r: _case(17.6))
    decode = next(o for o in outcomes if o.cell == "tg32")
    assert decode.status == Status.FAIL and "the history shows a step" in decode.reason
