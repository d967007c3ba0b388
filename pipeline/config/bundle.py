"""Load the whole configuration (models.yaml, thresholds/, golden/) and check it, collecting every issue."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import TypeVar

from pipeline.config import rules
from pipeline.config.cluster import build_cluster, cluster_issues
from pipeline.config.golden_sets import GoldenSet, build_golden
from pipeline.config.load import Document, display_name, load
from pipeline.config.matrix import Matrix, build_matrix
from pipeline.config.thresholds import Thresholds, build_thresholds
from pipeline.errors import ConfigError, ConfigIssue

T = TypeVar("T")


@dataclass(frozen=True)
class ConfigPaths:
    """Where the configuration lives."""

    models: Path
    thresholds: Path
    golden: Path
    cluster: Path | None = None  # the runner's cluster.yaml; absent or None: this runner has no cluster


@dataclass(frozen=True)
class Config:
    """The validated configuration: matrix, references per (hardware, entry id), golden sets."""

    paths: ConfigPaths
    matrix: Matrix
    thresholds: Mapping[tuple[str, str], Thresholds]
    golden: Mapping[str, GoldenSet]

    def thresholds_for(self, entry_id: str, cpu: str | None = None) -> Thresholds:
        """An entry's references; on a CPU profile, those measured on a host of the class `cpu` where there are."""
        entry = self.matrix.entry(entry_id)
        profile = self.matrix.profiles[entry.profile]
        thresholds = self.thresholds[(profile.hardware, entry.id)]
        return thresholds.on_host(cpu if profile.accelerator == "cpu" else None)


class _Collector:
    """Runs loaders and rules, keeping every ConfigIssue instead of stopping at the first."""

    def __init__(self) -> None:
        self.issues: list[ConfigIssue] = []

    def attempt(self, action: Callable[[], T]) -> T | None:
        try:
            return action()
        except ConfigError as exc:
            self.issues.extend(exc.issues)
            return None

    def add(self, issues: Iterable[ConfigIssue]) -> int:
        before = len(self.issues)
        self.issues.extend(issues)
        return len(self.issues) - before


def load_config(paths: ConfigPaths) -> Config:
    """Load and check everything; raise one ConfigError listing every issue in every file."""
    found = _Collector()
    golden_docs = _load_dir(found, paths.golden, "golden", pattern="*.yaml")
    for doc in golden_docs.values():
        found.add(rules.golden_set_issues(doc))
    threshold_docs = _load_dir(found, paths.thresholds, "thresholds", pattern="*/*.yaml")
    models_doc = found.attempt(lambda: load(paths.models, "models"))
    if models_doc is None:
        raise ConfigError(found.issues)
    matrix = build_matrix(models_doc.data)
    if paths.cluster is not None and paths.cluster.is_file():
        matrix = _with_cluster(found, matrix, paths.cluster)
    found.add(rules.matrix_issues(models_doc, matrix))
    # a golden file that exists but failed to load has reported its own issues; don't call it missing too
    golden_names = {p.stem for p in paths.golden.glob("*.yaml")} if paths.golden.is_dir() else set()
    found.add(rules.golden_reference_issues(models_doc, matrix, golden_names, display_name(paths.golden)))
    thresholds = _check_thresholds(found, models_doc, matrix, paths.thresholds, threshold_docs)
    if found.issues:
        raise ConfigError(found.issues)
    golden = {name: build_golden(name, doc.data) for name, doc in golden_docs.items()}
    return Config(paths, matrix, MappingProxyType(thresholds), MappingProxyType(golden))


def _with_cluster(found: _Collector, matrix: Matrix, path: Path) -> Matrix:
    """The matrix with the runner's cluster given to its profile, once the cluster file is found sound."""
    doc = found.attempt(lambda: load(path, "cluster"))
    if doc is None:
        return matrix
    cluster = build_cluster(doc)
    if found.add(cluster_issues(doc, cluster, tuple(matrix.profiles))) or cluster.profile not in matrix.profiles:
        return matrix
    profiles = dict(matrix.profiles)
    profiles[cluster.profile] = replace(profiles[cluster.profile], cluster=cluster)
    return replace(matrix, profiles=MappingProxyType(profiles))


def _load_dir(found: _Collector, directory: Path, schema_name: str, pattern: str) -> dict[str, Document]:
    """Load every file of a config directory; keys are paths relative to it, without '.yaml'."""
    if not directory.is_dir():
        found.add([ConfigIssue(display_name(directory), 1, 1, "", "directory not found; create it or fix the path")])
        return {}
    docs: dict[str, Document] = {}
    for path in sorted(directory.glob(pattern)):
        doc = found.attempt(lambda p=path: load(p, schema_name))  # type: ignore[misc]
        if doc is not None:
            docs[path.relative_to(directory).with_suffix("").as_posix()] = doc
    read = {directory / f"{name}.yaml" for name in docs} | set(directory.glob(pattern))
    for stray in sorted(p for p in directory.rglob("*") if p.is_file() and p not in read):
        if stray.suffix == ".yml":
            found.add([ConfigIssue(display_name(stray), 1, 1, "", "configuration files end in .yaml; rename it")])
        elif not stray.name.startswith("."):  # dotfiles (.gitkeep) are the repository's, not configuration
            where = f"{directory.name}/{pattern}"
            found.add(
                [
                    ConfigIssue(
                        display_name(stray), 1, 1, "", f"no rule reads this file (only {where}); move or delete it"
                    )
                ]
            )
    return docs


def _check_thresholds(
    found: _Collector, models_doc: Document, matrix: Matrix, directory: Path, docs: Mapping[str, Document]
) -> dict[tuple[str, str], Thresholds]:
    thresholds: dict[tuple[str, str], Thresholds] = {}
    used: set[str] = set()
    for entry in matrix.entries:
        profile = matrix.profiles.get(entry.profile)
        if profile is None:  # already reported as an unknown profile; its file is not an orphan
            used.update(key for key in docs if key.endswith(f"/{entry.id}"))
            continue
        key = f"{profile.hardware}/{entry.id}"
        used.add(key)
        doc = docs.get(key)
        if doc is None:
            if (directory / f"{key}.yaml").exists():
                continue  # the file exists but did not load: its own issues say why
            found.add([rules.missing_threshold_file(models_doc, entry, Path(display_name(directory)) / f"{key}.yaml")])
            continue
        cpu = profile.accelerator == "cpu"
        in_turns = profile.servers_at_once < 2
        if found.add(rules.threshold_issues(doc, entry, profile.hardware, cpu=cpu, in_turns=in_turns)) == 0:
            thresholds[(profile.hardware, entry.id)] = build_thresholds(profile.hardware, entry.id, doc.data)
    found.add(rules.orphan_issues(docs, used))
    return thresholds
