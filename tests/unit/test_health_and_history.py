"""Host health judged on real readings (an H200 idle and under load), nvidia-smi parsing, and the history store."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from pipeline.config.matrix import Profile, TorchExpectation
from pipeline.errors import HistoryError
from pipeline.infra.confirmed import BuildRef, ConfirmedBook, series_key
from pipeline.infra.gpu import GpuFacts, parse_nvidia_smi
from pipeline.infra.history import History, Sample
from pipeline.stages.prove.health import HostFacts, WindowFacts, judge_health
from pipeline.status import Status

SPARK = Profile(
    "spark",
    "spark-gb10",
    "cuda",
    TorchExpectation("2.13.0", "13.0"),
    "build",
    driver_min="580",
    driver_below="590",
    health={"min_sm_clock_mhz": 1200, "max_temperature_c": 90, "min_free_memory_gib": 10},
)
CPU = Profile("cpu", "cpu-x86", "cpu", TorchExpectation("2.13.0"), "pip", health={"max_load_per_core": 0.5})
# read through NVML on an H200, driver 580.159.04 (benchmarks/health_probe.py)
H200_IDLE = GpuFacts(0, "NVIDIA H200", 345, 1980, 0x1, 80.0, 34, 139.8)
H200_LOADED = GpuFacts(0, "NVIDIA H200", 1470, 1980, 0x4, 690.9, 54, 138.8)


def _facts(
    *gpus: GpuFacts,
    driver: str = "580.159.04",
    load: float = 0.01,
    competitors: tuple[tuple[int, str, float], ...] = (),
) -> HostFacts:
    return HostFacts(16, load, competitors, driver, gpus, "nvml")


def test_a_real_idle_and_a_real_loaded_gpu_are_healthy() -> None:
    assert judge_health(SPARK, _facts(H200_IDLE)).healthy
    assert judge_health(SPARK, _facts(H200_LOADED), under_load=True).healthy  # power-limit flags under load are normal


def test_a_gpu_stuck_at_a_low_clock_under_load_is_unhealthy() -> None:
    stuck = GpuFacts(0, "NVIDIA GB10", 700, 2500, 0x0, 22.0, 45, 100.0)
    report = judge_health(SPARK, _facts(stuck), under_load=True)
    assert report.reasons == ("GPU 0 runs at 700 MHz under load, floor 1200 MHz",)


def test_under_load_an_idle_gpu_beside_a_working_one_has_no_clock_floor() -> None:
    # two GPUs of one machine, a solo entry on the first: the second idles at 345 MHz and is nobody's measurement
    serving = replace(H200_LOADED, processes=1)
    idle = replace(H200_IDLE, index=1, processes=0)
    assert judge_health(SPARK, _facts(serving, idle), under_load=True).healthy
    # the one that works is still held to its floor, and a GPU whose processes cannot be read is taken as working
    slow = replace(H200_LOADED, sm_clock_mhz=700, processes=1)
    assert judge_health(SPARK, _facts(slow, idle), under_load=True).reasons == (
        "GPU 0 runs at 700 MHz under load, floor 1200 MHz (software power cap)",
    )
    unread = replace(H200_IDLE, index=1)
    assert judge_health(SPARK, _facts(serving, unread), under_load=True).reasons == (
        "GPU 1 runs at 345 MHz under load, floor 1200 MHz",
    )
    # with nothing running anywhere (the listing empty), no GPU is excused
    assert not judge_health(SPARK, _facts(replace(H200_IDLE, processes=0)), under_load=True).healthy


def test_an_idle_gpu_holding_its_clock_down_is_unhealthy() -> None:
    throttled = GpuFacts(0, "NVIDIA GB10", 700, 2500, 0x40 | 0x4, 30.0, 95, 100.0)
    reasons = judge_health(SPARK, _facts(throttled)).reasons
    assert reasons == (
        "GPU 0 clock held down: software power cap, hardware thermal slowdown (reasons 0x44)",
        "GPU 0 at 95 C, above 90 C",
    )


def test_the_driver_must_be_in_the_allowed_range() -> None:
    assert judge_health(SPARK, _facts(H200_IDLE, driver="590.44.01")).reasons == ("driver 590.44.01 is not below 590",)
    assert judge_health(SPARK, _facts(H200_IDLE, driver="575.1")).reasons == ("driver 575.1 is older than 580",)
    assert judge_health(SPARK, _facts()).reasons == ("no GPU visible (NVML and nvidia-smi found none)",)


def test_cpu_use_by_processes_that_are_not_ours_makes_the_host_unhealthy() -> None:
    hog = HostFacts(2, 1.4, ((4242, "stress", 0.98), (77, "cron", 0.06)), None, (), "none")
    assert judge_health(CPU, hog).reasons == (
        "processes that are not ours use 0.52 of each core (max 0.5): 4242 (stress) 98%, 77 (cron) 6%",
    )
    # a high load average alone (our own server just ran) is not a reason: it lags and counts our processes
    assert judge_health(CPU, HostFacts(2, 1.4, ((77, "cron", 0.06),), None, (), "none")).healthy


def test_nvidia_smi_output_parses_into_the_same_facts() -> None:
    # `nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits` on the same H200
    driver, gpus, source = parse_nvidia_smi(
        "0, NVIDIA H200, 360, 1980, 0x0000000000000001, 96.67, 34, 143155, 580.159.04\n"
    )
    assert (driver, source) == ("580.159.04", "nvidia-smi")
    assert gpus[0] == GpuFacts(0, "NVIDIA H200", 360, 1980, 1, 96.67, 34, 143155 / 1024)


def _sample(night: str, value: float, **changes: object) -> Sample:
    values: dict[str, object] = {
        "run_id": f"run-{night}",
        "night": night,
        "hardware": "cpu-x86",
        "host": "h1",
        "entry": "m",
        "cell": "tg32",
        "metric": "tg_tps",
        "value": value,
    }
    values.update(changes)
    return Sample(**values)  # type: ignore[arg-type]


def test_history_groups_samples_by_night_oldest_first(tmp_path: Path) -> None:
    history = History(tmp_path / "history.sqlite")
    history.record(
        [
            _sample("2026-11-02", 20.0),
            _sample("2026-11-01", 19.0),
            _sample("2026-11-02", 21.0),
            _sample("2026-11-03", 5.0, host="h2"),
            _sample("2026-11-03", 30.0, build="last-good"),
        ]
    )
    series = history.nights(hardware="cpu-x86", entry="m", cell="tg32", metric="tg_tps")
    assert [(n.night, n.values) for n in series] == [
        ("2026-11-01", (19.0,)),
        ("2026-11-02", (20.0, 21.0)),
        ("2026-11-03", (5.0,)),
    ]
    one_host = history.nights(hardware="cpu-x86", entry="m", cell="tg32", metric="tg_tps", host="h1", limit=1)
    assert [n.night for n in one_host] == ["2026-11-02"]
    before = history.nights(hardware="cpu-x86", entry="m", cell="tg32", metric="tg_tps", before="2026-11-02")
    assert [n.night for n in before] == ["2026-11-01"]


def test_a_night_run_twice_sees_its_earlier_run_as_history(tmp_path: Path) -> None:
    history = History(tmp_path / "history.sqlite")
    history.record([_sample("2026-11-01", 19.0), _sample("2026-11-02", 20.0, run_id="20261102-013000")])
    again = history.nights(
        hardware="cpu-x86", entry="m", cell="tg32", metric="tg_tps", before="2026-11-02", before_run="20261102-090000"
    )
    assert [(n.night, n.run_id) for n in again] == [("2026-11-01", "run-2026-11-01"), ("2026-11-02", "20261102-013000")]
    first = history.nights(
        hardware="cpu-x86", entry="m", cell="tg32", metric="tg_tps", before="2026-11-02", before_run="20261102-013000"
    )
    assert [n.night for n in first] == ["2026-11-01"]  # never its own samples


def test_a_history_of_another_schema_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "history.sqlite"
    History(path).record([_sample("2026-11-01", 1.0)])
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(HistoryError, match="schema version 99"):
        History(path).record([_sample("2026-11-02", 1.0)])


def test_only_accepted_nights_make_the_baseline_and_every_verdict_is_kept(tmp_path: Path) -> None:
    history = History(tmp_path / "history.sqlite")
    history.record(
        [
            _sample("2026-11-01", 20.0),
            _sample("2026-11-02", 17.0, verdict="FAIL"),
            _sample("2026-11-03", 18.0, verdict="INCONCLUSIVE"),
            _sample("2026-11-04", 20.5, verdict="XFAIL"),
        ]
    )
    every = history.nights(hardware="cpu-x86", entry="m", cell="tg32", metric="tg_tps")
    assert [(n.night, n.verdict) for n in every] == [
        ("2026-11-01", "PASS"),
        ("2026-11-02", "FAIL"),
        ("2026-11-03", "INCONCLUSIVE"),
        ("2026-11-04", "XFAIL"),
    ]
    baseline = history.nights(hardware="cpu-x86", entry="m", cell="tg32", metric="tg_tps", accepted_only=True)
    assert [n.night for n in baseline] == ["2026-11-01", "2026-11-04"]


def test_a_schema_1_history_is_migrated_and_its_nights_stay_the_baseline(tmp_path: Path) -> None:
    path = tmp_path / "history.sqlite"
    with sqlite3.connect(path) as connection:  # a history as version 1 wrote it: no verdict column
        connection.executescript(
            "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
            "INSERT INTO meta VALUES ('schema_version', '1');"
            "CREATE TABLE samples (id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, night TEXT NOT NULL,"
            " hardware TEXT NOT NULL, host TEXT NOT NULL, entry TEXT NOT NULL, cell TEXT NOT NULL,"
            " metric TEXT NOT NULL, value REAL NOT NULL, build TEXT NOT NULL, commits TEXT NOT NULL,"
            " health TEXT NOT NULL);"
            "INSERT INTO samples VALUES (1, 'r1', '2026-10-01', 'cpu-x86', 'h1', 'm', 'tg32', 'tg_tps', 19.5,"
            " 'candidate', '{}', '{}');"
        )
    history = History(path)
    history.record([_sample("2026-11-01", 20.0, verdict="FAIL")])
    baseline = history.nights(hardware="cpu-x86", entry="m", cell="tg32", metric="tg_tps", accepted_only=True)
    # the schema-1 night stays in the baseline, read back as accepted (PASS); its row keeps saying where it came from
    assert [(n.night, n.verdict) for n in baseline] == [("2026-10-01", Status.PASS)]
    with sqlite3.connect(path) as connection:
        assert connection.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == ("2",)
        assert connection.execute("SELECT verdict FROM samples WHERE night = '2026-10-01'").fetchall() == [("legacy",)]


def test_foreign_cpu_time_over_the_measurement_window_makes_the_host_unhealthy() -> None:
    profile = Profile("cpu", "cpu-x86", "cpu", TorchExpectation("2.13.0"), "pip", health={"max_load_per_core": 0.25})
    busy = WindowFacts(seconds=20.0, cpu_count=2, busy_s=36.0, ours_s=24.0)  # 12 CPU-seconds not ours
    report = judge_health(profile, HostFacts(2, 0.0, (), window=busy), under_load=True)
    assert busy.foreign_per_core == pytest.approx(0.3) and report.healthy is False
    assert "0.30 of each core over the 20 s measurement" in report.reasons[0]
    assert "short-lived processes included" in report.reasons[0]
    quiet = WindowFacts(seconds=20.0, cpu_count=2, busy_s=25.0, ours_s=24.0)
    assert judge_health(profile, HostFacts(2, 0.0, (), window=quiet), under_load=True).healthy
    strict = Profile("cpu", "cpu-x86", "cpu", TorchExpectation("2.13.0"), "pip", health={"max_load_per_core": 0.02})
    assert not judge_health(strict, HostFacts(2, 0.0, (), window=quiet), under_load=True).healthy


def test_the_newest_confirmed_build_of_an_entry_is_the_one_a_judge_serves(tmp_path: Path) -> None:
    book = ConfirmedBook(tmp_path / "confirmed.json")
    assert book.newest_for_entry("spark-gb10", "m") is None

    def build(name: str, night: str) -> BuildRef:
        return BuildRef(name, "image", f"spark-nightly/runtime:{name}", "0" * 64, {}, {}, night)

    book.accept(
        series_key("spark-gb10", "m", "tg32", "tg_tps"),
        build("old", "2026-11-01"),
        night="2026-11-01",
        run_id="r1",
        how="pairs",
    )
    book.accept(
        series_key("spark-gb10", "m", "pp2048", "pp_tps"),
        build("new", "2026-11-03"),
        night="2026-11-03",
        run_id="r3",
        how="pairs",
    )
    book.accept(
        series_key("spark-gb10", "other", "tg32", "tg_tps"),
        build("x", "2026-11-05"),
        night="2026-11-05",
        run_id="r5",
        how="pairs",
    )
    newest = book.newest_for_entry("spark-gb10", "m")
    assert newest is not None and newest.id == "new"
    assert book.newest_for_entry("cpu-x86", "m") is None
