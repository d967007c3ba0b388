"""Broken engines inside the decoder: attention projections zeroed, layers reversed, two layers swapped."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.infra.references import References
from tests.integration.conftest import CpuEngine
from tests.integration.variants.golden_variants import assert_caught

pytestmark = [pytest.mark.integration, pytest.mark.calibration]


@pytest.mark.parametrize("name", ["zeroed attention projections", "layers reversed", "two layers swapped"])
def test_a_broken_decoder_is_caught_with_and_without_a_reference(
    name: str, cpu_engine: CpuEngine, good_golden_reference: References, tmp_path: Path
) -> None:
    assert_caught(name, cpu_engine, good_golden_reference, tmp_path)
