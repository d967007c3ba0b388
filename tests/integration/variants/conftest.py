"""The good model's first night, made once per worker: the reference every broken engine is judged against."""

from __future__ import annotations

import pytest

from pipeline.infra.references import References
from tests.integration.conftest import CpuEngine
from tests.integration.variants.golden_variants import good_night


@pytest.fixture(scope="session")
def good_golden_reference(cpu_engine: CpuEngine, tmp_path_factory: pytest.TempPathFactory) -> References:
    """The good model's golden outputs of a night with no reference (judged by transformers, so recorded)."""
    return good_night(cpu_engine, tmp_path_factory.mktemp("good-night"))
