"""Broken engines at the input: a NaN embedding for one prompt's token, a changed RoPE theta; and a benign
change (weights rounded to bf16 and back) that must pass both ways."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.infra.references import References
from tests.integration.broken_models import golden_both_ways, make_broken, short_golden
from tests.integration.conftest import CpuEngine
from tests.integration.variants.golden_variants import assert_caught, failing, show

pytestmark = [pytest.mark.integration, pytest.mark.calibration]


def test_a_nan_prompt_is_named_the_cause_and_the_rest_are_judged_on_a_restarted_server(
    cpu_engine: CpuEngine, good_golden_reference: References, tmp_path: Path
) -> None:
    judged = assert_caught("NaN embedding of one prompt's token", cpu_engine, good_golden_reference, tmp_path)
    for result in (judged.unreferenced, judged.referenced):
        cause = failing(result, "logprobs", "capital-of-japan")[0]
        assert "the first such request on its server (the cause)" in cause.reason
        others = [v for v in result.verdicts if v.check == "logprobs" and v.subject != "capital-of-japan"]
        other_prompts = {p.id for p in short_golden(cpu_engine).prompts} - {"capital-of-japan"}
        assert {v.subject for v in others} == other_prompts and all(v.status == "PASS" for v in others), others
        assert [v.subject for v in result.verdicts if v.check == "logprobs" and v.status == "FAIL"] == [
            "capital-of-japan"
        ]


def test_a_changed_rope_theta_is_caught_with_and_without_a_reference(
    cpu_engine: CpuEngine, good_golden_reference: References, tmp_path: Path
) -> None:
    assert_caught("RoPE theta / 10", cpu_engine, good_golden_reference, tmp_path)


def test_weights_rounded_to_bf16_and_back_pass_both_ways(
    cpu_engine: CpuEngine, good_golden_reference: References, tmp_path: Path
) -> None:
    judged = golden_both_ways(cpu_engine, make_broken(cpu_engine, tmp_path, "bf16"), tmp_path, good_golden_reference)
    show("bf16 round trip", judged)
    for result in (judged.unreferenced, judged.referenced):
        assert result.recordable, [(v.check, v.subject, v.reason) for v in result.failures]
        shifts = [
            v.evidence.get("judge_mean_abs_diff", v.evidence.get("rescored_mean_abs_diff"))
            for v in result.verdicts
            if v.check == "drift"
        ]
        print("  drift, mean |difference| in nats per answer:", shifts)
