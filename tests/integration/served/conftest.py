"""One real vLLM server of the good build, shared by this folder's tests: they only read from it and time
nothing, so they run beside other tests in the suite's parallel phase.

Session scope: a pytest-xdist worker boots it at most once, whichever of this folder's files it is handed (the
quiet phase deselects these tests, so it is never booted there).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pipeline.infra.server import Server
from tests.integration.conftest import CpuEngine, serve_good_build


@pytest.fixture(scope="session")
def cpu_server(cpu_engine: CpuEngine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from serve_good_build(cpu_engine, tmp_path_factory.mktemp("served"))
