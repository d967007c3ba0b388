"""The good model's first night, made once per test session: the reference every broken engine is judged against."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType

import pytest

from pipeline.infra.references import References, ReferenceStore
from tests.integration.conftest import CpuEngine
from tests.integration.variants.golden_variants import good_night


@pytest.fixture(scope="session")
def cpu_engine(cpu_engine: CpuEngine) -> CpuEngine:
    """The CPU profile with its entry served without the tool-call parser: the variants break weights, and the
    tool-call features are proven on the good build (served/) and on builds broken for them
    (test_golden_features.py); the JSON-schema answer is still asked of every variant."""
    serve = {
        k: v for k, v in cpu_engine.entry.serve.items() if k not in ("tool_call_parser", "enable_auto_tool_choice")
    }
    return replace(cpu_engine, entry=replace(cpu_engine.entry, serve=MappingProxyType(serve)))


@pytest.fixture(scope="session")
def good_golden_reference(cpu_engine: CpuEngine, tmp_path_factory: pytest.TempPathFactory) -> References:
    """The good model's golden outputs of a night with no reference (judged by transformers, so recorded).

    pytest-xdist workers share it through the session's temporary folder, as a night keeps its reference in the
    state: the first worker to need it makes it while the others wait (making it is a boot, a golden run and the
    judge, about a minute), and the rest read it back.
    """
    shared = _session_folder(tmp_path_factory)
    store = ReferenceStore(shared / "good-night" / "golden")
    hardware = cpu_engine.config.matrix.profiles[cpu_engine.entry.profile].hardware
    with _exclusive(shared / "good-night.lock"):
        kept = store.load(hardware, cpu_engine.entry.id)
        if kept is not None:
            return kept
        made = good_night(cpu_engine, tmp_path_factory.mktemp("good-night"))
        store.save(hardware, cpu_engine.entry.id, made.night, list(made.outputs.values()), made.identity_files)
        return made


def _session_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This session's temporary folder, which pytest-xdist's workers each have a folder in."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@contextmanager
def _exclusive(lock: Path) -> Iterator[None]:
    with lock.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file closes, also if the maker fails
        yield
