"""Fixtures for tests on real processes and the real vLLM CPU engine, and the suite's own leftover check."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
import yaml

from pipeline.config.bundle import Config, ConfigPaths, load_config
from pipeline.config.matrix import ModelEntry
from pipeline.infra import procs
from pipeline.infra.releases import LocalReleaseStore
from pipeline.infra.server import Server
from pipeline.infra.weights import model_reference
from pipeline.settings import from_environment
from pipeline.stages.prove.boot import Candidate, boot, prepare_candidate
from tests.fakes.github import TOKEN, StandIn, github_stand_in
from tests.shops import online

ROOT = Path(__file__).parents[2]
GATE = ROOT / ".venv" / "bin" / "spark-nightly"  # the command a user runs, for nights in a process of their own


def require_root_and(tools: Mapping[str, str], what: str, why_root: str) -> None:
    """Fail, naming what is missing, unless this runs as root with each of `tools` (a command: Debian's package)."""
    missing = [] if os.geteuid() == 0 else [f"root ({why_root})"]
    missing += [f"{tool} (Debian's {package})" for tool, package in tools.items() if not shutil.which(tool)]
    if missing:
        raise RuntimeError(f"{what} needs {', '.join(missing)}: ./scripts/test installs them")


CPU_ENTRY = "smollm2-135m-instruct"


@pytest.fixture(scope="session", autouse=True)
def owner_marker() -> Iterator[str]:
    """Mark every process the suite starts; at the end, none may be left (checked here, by the suite itself)."""
    marker = f"pytest-{uuid.uuid4().hex[:12]}"
    previous = os.environ.get(procs.OWNER_ENV)
    os.environ[procs.OWNER_ENV] = marker
    yield marker
    leftovers = procs.owned_processes(marker)
    for pid in leftovers:
        os.kill(pid, 9)
    if previous is None:
        del os.environ[procs.OWNER_ENV]
    else:
        os.environ[procs.OWNER_ENV] = previous
    assert leftovers == [], f"processes of ours outlived the suite: {leftovers}"


@pytest.fixture()
def stand_in() -> Iterator[StandIn]:
    """The GitHub stand-in; every request and answer it saw must have kept GitHub's contract."""
    with github_stand_in(TOKEN) as server:
        yield server
        assert server.state.contract_errors == []


@dataclass(frozen=True)
class CpuEngine:
    """The project's CPU profile, ready to boot: configuration, candidate runtime, caches."""

    config: Config
    entry: ModelEntry
    candidate: Candidate
    cache_dir: Path


@pytest.fixture(scope="session")
def cpu_engine(tmp_path_factory: pytest.TempPathFactory) -> CpuEngine:
    """The CPU profile's runtime and weights, made (or reused from the cache) as the nightly would."""
    config = load_config(ConfigPaths(ROOT / "models.yaml", ROOT / "thresholds", ROOT / "golden"))
    entry = config.matrix.entry(CPU_ENTRY)
    entry = replace(entry, env=MappingProxyType(on_this_workers_core(entry.env)))
    cache_dir = from_environment().settings.places.cache  # SPARK_NIGHTLY_PATHS_CACHE moves it
    log_dir = tmp_path_factory.mktemp("setup-logs")
    candidate = prepare_candidate(config.matrix.profiles[entry.profile], online(cache_dir), log_dir)
    # convert the weights now (a boot never does), so no test times the conversion
    model_reference(entry, online(cache_dir), log_dir)
    return CpuEngine(config, entry, candidate, cache_dir)


def on_this_workers_core(env: Mapping[str, str]) -> dict[str, str]:
    """The CPU entry's environment, its server bound to this pytest-xdist worker's own core.

    The shipped entry binds the server to the first core (one server at a time on a runner); in the suite's
    parallel phase each worker boots its own, and two servers bound to one core would leave the other idle.
    """
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None or "OMP_PLACES" not in env:
        return dict(env)
    return {**env, "OMP_PLACES": f"{{{int(worker.removeprefix('gw')) % (os.cpu_count() or 1)}}}"}


def serve_good_build(engine: CpuEngine, log_dir: Path) -> Iterator[Server]:
    """The good build serving the CPU entry: the body of the package-scoped `cpu_server` fixtures."""
    with boot(engine.entry, engine.candidate, cache_dir=engine.cache_dir, log_dir=log_dir) as server:
        yield server


@dataclass(frozen=True)
class Place:
    """Where one test's nights keep their runs, history, releases and configuration."""

    root: Path

    @property
    def runs(self) -> Path:
        return self.root / "runs"

    @property
    def store(self) -> LocalReleaseStore:
        return LocalReleaseStore(self.root / "releases")

    def alerts(self) -> dict[str, dict[str, object]]:
        data: dict[str, dict[str, object]] = json.loads((self.root / "history" / "alerts.json").read_text())["alerts"]
        return data

    def last_run(self) -> dict[str, object]:
        latest = sorted(self.runs.iterdir())[-1]
        data: dict[str, object] = json.loads((latest / "run.json").read_text())
        return data

    @contextmanager
    def cpu_entry(self) -> Iterator[dict[str, Any]]:
        """The CPU entry of this place's models.yaml, to change in the block; written back after it (a YAML round
        trip: the copy loses its comments)."""
        models = self.root / "config" / "models.yaml"
        data = yaml.safe_load(models.read_text())
        (entry,) = [e for e in data["models"] if e["id"] == CPU_ENTRY]
        yield entry
        models.write_text(yaml.safe_dump(data, sort_keys=False))


def make_place(root: Path) -> Place:
    """A place under `root` with the shipped configuration, the CPU entry's server on this worker's core."""
    config = root / "config"
    config.mkdir(parents=True)
    shutil.copy(ROOT / "models.yaml", config / "models.yaml")
    shutil.copytree(ROOT / "thresholds", config / "thresholds")
    shutil.copytree(ROOT / "golden", config / "golden")
    place = Place(root)
    with place.cpu_entry() as entry:
        entry["env"] = on_this_workers_core(entry["env"])
    return place


def live_in(place: Place, monkeypatch: pytest.MonkeyPatch) -> None:
    """Point the settings of every night run in this process at `place`."""
    monkeypatch.setenv("SPARK_NIGHTLY_PATHS_RUNS", str(place.root / "runs"))
    monkeypatch.setenv("SPARK_NIGHTLY_PATHS_STATE", str(place.root / "history"))
    monkeypatch.setenv("SPARK_NIGHTLY_PATHS_CONFIG", str(place.root / "config"))
    monkeypatch.setenv("SPARK_NIGHTLY_PUBLISH_LOCAL_DIR", str(place.root / "releases"))
    monkeypatch.setenv("SPARK_NIGHTLY_PATHS_WHEELS", str(place.root / "wheels"))


@pytest.fixture()
def place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Place:
    made = make_place(tmp_path)
    live_in(made, monkeypatch)
    return made


def golden_for_another_stage(place: Place) -> None:
    """The CPU entry's golden stage less its long decode and its tool-call features, for nights whose subject is
    another stage: the long decode is a third of a golden run on the CPU engine, the tool calls three requests more;
    served/test_golden_real.py runs both in full, test_golden_features.py breaks the features (the JSON-schema
    answer is still asked)."""
    with place.cpu_entry() as entry:
        path = place.root / "config" / "golden" / f"{entry['golden']}.yaml"
        for option in ("tool_call_parser", "enable_auto_tool_choice"):
            entry["serve"].pop(option, None)
    golden = yaml.safe_load(path.read_text())
    del golden["long_decode"]
    path.write_text(yaml.safe_dump(golden, sort_keys=False))


def bench_one_case(place: Place) -> None:
    """The CPU entry measured on its concurrency-1 case only, with that case's references: a shorter night that is
    judged the same way (a single concurrency drops the "(c1)" from the cells' names)."""
    with place.cpu_entry() as entry:
        entry["bench"] = {**entry["bench"], "concurrency": [1]}
    thresholds = place.root / "config" / "thresholds" / "cpu-x86" / f"{CPU_ENTRY}.yaml"
    references = yaml.safe_load(thresholds.read_text())
    references["cells"] = {
        name.removesuffix(" (c1)"): cell for name, cell in references["cells"].items() if name.endswith("(c1)")
    }
    thresholds.write_text(yaml.safe_dump(references, sort_keys=False))


def beside_other_tests(place: Place) -> None:
    """The CPU profiles of this place with a health limit that lets their nights run beside other tests (the suite's
    parallel phase): see `raise_health_limits`; and its CPU cells judged by this place's own nights alone (see
    `judged_by_own_nights`)."""
    models = place.root / "config" / "models.yaml"
    data = yaml.safe_load(models.read_text())
    raise_health_limits(data)
    models.write_text(yaml.safe_dump(data, sort_keys=False))
    judged_by_own_nights(place)


def judged_by_own_nights(place: Place) -> None:
    """The place's CPU cells with no fixed reference (`ref: null`, `pending`), as a class of host no file measured:
    a first night is then judged by its history alone, later ones by that history and their pairs beside the last
    confirmed build, which the other worker's load slows as much as tonight's. With the health limit raised, the
    fixed levels would meet that load with nothing beside them: in a run from empty caches (at 954cce6) the built
    nights' good night measured tg32 6.5 t/s against the file's 18.5 for this class (-64.7 %, past its fail level
    of -60 %) while the other worker made runtimes, and a good build FAILed on the host's account. The fixed levels
    are proven on quiet places (`quiet_host`) and by the unit tests of the gate."""
    for thresholds in sorted((place.root / "config" / "thresholds" / "cpu-x86").glob("*.yaml")):
        references = yaml.safe_load(thresholds.read_text())
        for cell in references["cells"].values():
            cell.pop("by_host", None)
            cell.update(ref=None, pending="its nights run beside other tests, whose load takes a share of the host")
        thresholds.write_text(yaml.safe_dump(references, sort_keys=False))


def raise_health_limits(models: dict[str, Any]) -> None:
    """A models.yaml's CPU profiles with a health limit that lets their nights run beside other tests, for nights whose
    subject is not a timing: where the files come from, a golden failure, a boot crash, a build refused, a cluster.
    A night's health stage would otherwise find the other worker's processes and end INCONCLUSIVE. Both profiles:
    `cpu-built` serves the entries of `cpu` and restates their health (validate refuses it otherwise)."""
    for profile in ("cpu", "cpu-built"):
        health = models["profiles"][profile].get("health", {})
        models["profiles"][profile]["health"] = {**health, "max_load_per_core": 100.0}


def one_server_at_a_time(place: Place, *, golden_judge: str | None = None) -> None:
    """The CPU profiles of this place as a Spark runs: one server at a time (the last confirmed build served in turns
    with tonight's), and optionally the Spark's golden judge (the last confirmed build) instead of transformers. Both
    profiles: `cpu-built` serves the entries of `cpu` and restates what its nights read there (validate refuses it
    otherwise)."""
    models = place.root / "config" / "models.yaml"
    data = yaml.safe_load(models.read_text())
    for profile in ("cpu", "cpu-built"):
        data["profiles"][profile]["servers_at_once"] = 1
        if golden_judge is not None:
            data["profiles"][profile]["golden_judge"] = golden_judge
    models.write_text(yaml.safe_dump(data, sort_keys=False))
