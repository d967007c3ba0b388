"""One real vLLM server of the good build, shared by this folder's tests, which time it or judge the host's
health: they run alone on a quiet host (the suite's serial phase). It lives as long as this folder's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pipeline.infra.server import Server
from tests.integration.conftest import CpuEngine, serve_good_build


@pytest.fixture(scope="package")
def cpu_server(cpu_engine: CpuEngine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from serve_good_build(cpu_engine, tmp_path_factory.mktemp("measured"))
