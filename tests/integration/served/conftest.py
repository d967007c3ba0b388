"""One real vLLM server of the good build, shared by this folder's tests: they only read from it and time
nothing, so they run beside other tests in the suite's parallel phase.

Package scope: it is stopped once this folder's tests are done, so the tests after them that check that no
process of ours is left see none. The suite's scheduler (tests/conftest.py) hands this folder to one worker whole.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pipeline.infra.server import Server
from tests.integration.conftest import CpuEngine, serve_good_build


@pytest.fixture(scope="package")
def cpu_server(cpu_engine: CpuEngine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from serve_good_build(cpu_engine, tmp_path_factory.mktemp("served"))
