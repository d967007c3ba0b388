"""The golden checks as pure functions, fed with recorded outputs (real shapes of vLLM answers)."""

from __future__ import annotations

import math

from pipeline.checks.agreement import check_batch_invariance, check_determinism, check_drift
from pipeline.checks.answers import check_answer, check_corrupted_counter, check_finite_logprobs
from pipeline.checks.garbage import check_garbage, check_long_decode, text_stats
from pipeline.checks.identity import check_identity
from pipeline.checks.tools import check_reasoning, check_tool_call
from pipeline.config.canaries import generate
from pipeline.config.golden_sets import Expectation
from pipeline.infra.openai_client import Generation, ServedModel

GOOD = Generation(
    "france",
    "The capital of France is Paris.",
    ("The", " capital", " of", " France", " is", " Paris", "."),
    (-0.01, -0.2, -0.001, -0.02, -0.03, -0.05, -0.3),
    tuple(
        {t: lp, "X": lp - 3}
        for t, lp in zip(
            ("The", " capital", " of", " France", " is", " Paris", "."),
            (-0.01, -0.2, -0.001, -0.02, -0.03, -0.05, -0.3),
            strict=True,
        )
    ),
    "stop",
)


def test_answers_are_judged_by_every_condition_given() -> None:
    assert check_answer(GOOD, Expectation(exact="The capital of France is Paris."), "q").status == "PASS"
    assert check_answer(GOOD, Expectation(contains=("paris",)), "q").status == "PASS"
    wrong = check_answer(GOOD, Expectation(contains=("Rome",), regex=r"^Paris"), "q")
    assert wrong.status == "FAIL"
    assert wrong.reason == "does not contain 'Rome'; does not match /^Paris/"
    assert wrong.evidence["answer"] == "The capital of France is Paris."
    number = Generation("m", "17 times 23 is 391.")
    assert check_answer(number, Expectation(number=391.0), "q").status == "PASS"
    assert (
        check_answer(number, Expectation(number=392.0), "q").reason
        == "has no number 392 (+-0); found [17.0, 23.0, 391.0]"
    )
    assert check_answer(GOOD, None, "q").status == "SKIPPED"


def test_nan_inf_and_null_logprobs_fail() -> None:
    assert check_finite_logprobs(GOOD).status == "PASS"
    for bad in (math.nan, math.inf, None):
        broken = Generation("p", "!!", ("!", "!"), (-0.1, bad), ({"!": -0.1}, {"!": bad}))
        verdict = check_finite_logprobs(broken)
        assert verdict.status == "FAIL" and verdict.evidence["non_finite"] == 1
    assert check_finite_logprobs(Generation("p", "text")).reason == "the server returned no logprobs"


def test_the_nan_counter_must_not_move() -> None:
    assert check_corrupted_counter(0.0, 0.0).status == "PASS"
    assert check_corrupted_counter(0.0, 3.0).reason == "3 requests had NaN logits"
    assert check_corrupted_counter(None, None).status == "SKIPPED"


def test_garbage_statistics_catch_each_kind_of_garbage() -> None:
    assert check_garbage(GOOD).status == "PASS"
    assert check_garbage(Generation("p", "  ")).reason == "empty answer"
    mixed = check_garbage(Generation("p", "Paris Париж 巴黎 パリ Parigi Парижа 巴黎市 ปารีส"))
    assert mixed.status == "FAIL" and "mixed scripts" in mixed.reason
    loop = check_garbage(Generation("p", "I am a robot. " * 40))
    assert loop.status == "FAIL" and "loops" in loop.reason
    unprintable = check_garbage(Generation("p", "ok\x00\x01\x02\x03\x04\x05\x06 fine"))
    assert "printable" in unprintable.reason
    unsure = Generation("p", "Zorg blemish quantity.", ("Zorg", " blem", "ish"), (-9.5, -10.2, -11.0))
    assert "mean token logprob -10.23 (min -4)" in check_garbage(unsure).reason
    drop = check_garbage(Generation("p", "Paris is nice.", ("Paris",), (-2.5,)), reference_logprob=-0.2)
    assert "2.30 below the reference -0.20" in drop.reason


def test_text_stats_show_the_numbers_they_judge() -> None:
    stats = text_stats("The capital of France is Paris.", (-0.5, -1.5))
    assert (stats.words, stats.main_script, stats.foreign_script_share, stats.mean_logprob) == (6, "LATIN", 0.0, -1.0)


def _long(tokens: list[str], logprobs: list[float]) -> Generation:
    return Generation("long", "".join(tokens), tuple(tokens), tuple(logprobs), tuple({} for _ in tokens), "length")


def test_long_decode_allows_late_loops_but_not_late_collapse() -> None:
    words = [" the", " river", " runs", " to", " the", " sea", " and", " back"] * 20
    looping_tail = _long(words[:64] + [" again"] * 96, [-0.5] * 64 + [-0.1] * 96)
    assert check_long_decode(looping_tail, window=32).status == "PASS"
    collapsed = _long(words[:64] + ["ж", "ッ", "ק", "ʘ"] * 24, [-0.5] * 64 + [-7.0] * 96)
    verdict = check_long_decode(collapsed, window=32)
    assert verdict.status == "FAIL" and verdict.reason.startswith("tail: ")
    short = check_long_decode(_long(words[:10], [-0.5] * 10), window=32)
    assert short.reason == "only 10 tokens generated (finish length); need 64"


def _variant(
    tokens: tuple[str, ...], logprobs: tuple[float, ...], tops: tuple[dict[str, float | None], ...]
) -> Generation:
    return Generation("france", "".join(tokens), tokens, logprobs, tops)


def test_determinism_and_batch_invariance_use_the_top_k_rule() -> None:
    assert check_determinism(GOOD, GOOD).status == "PASS"
    other = _variant((*GOOD.tokens[:5], "X", "."), GOOD.logprobs, GOOD.top)
    determinism = check_determinism(GOOD, other)
    assert determinism.status == "FAIL" and determinism.evidence["first_divergence"] == 5
    assert check_batch_invariance(GOOD, other).status == "PASS"  # " Paris" and "X": each in the other's top
    unrelated_top = tuple({t: 0.0} for t in other.tokens)
    far = _variant(other.tokens, other.logprobs, unrelated_top)
    assert check_batch_invariance(GOOD, far).status == "FAIL"


def test_drift_passes_identical_outputs_and_fails_moved_logprobs_or_foreign_tokens() -> None:
    assert check_drift(GOOD, None).status == "PASS"
    assert check_drift(GOOD, GOOD).reason == "tokens identical; logprobs within 0.1 nats"
    moved = _variant(GOOD.tokens, tuple(v - 0.5 for v in GOOD.logprobs), GOOD.top)
    verdict = check_drift(moved, GOOD, reference_night="2026-11-20")
    assert verdict.status == "FAIL" and "moved by 0.500 nats" in verdict.reason
    assert verdict.evidence["reference_night"] == "2026-11-20"
    foreign = _variant((*GOOD.tokens[:5], " Lyon", "."), GOOD.logprobs, tuple({t: 0.0} for t in GOOD.tokens))
    assert "neither is in the other's top-5" in check_drift(foreign, GOOD).reason


def test_identity_compares_the_server_with_models_yaml() -> None:
    served = [ServedModel("org/m", 2048, "/models/m")]
    config = {"architectures": ["LlamaForCausalLM"], "hidden_size": 576}
    ok = check_identity(
        served,
        name="org/m",
        max_model_len=2048,
        model_ref="/models/m",
        config=config,
        expected={"architectures": "LlamaForCausalLM", "hidden_size": 576},
    )
    assert ok.status == "PASS"
    wrong = check_identity(
        served,
        name="org/m",
        max_model_len=4096,
        model_ref="/models/other",
        config=config,
        expected={"hidden_size": 1024},
    )
    assert wrong.reason == (
        "max_model_len 2048, configured 4096; serves weights from /models/m, configured "
        "/models/other; config.json hidden_size is 576, models.yaml expects 1024"
    )
    assert (
        check_identity(
            [ServedModel("Qwen/Qwen3-0.6B", 40960, None)],
            name="Qwen/Qwen3.5-35B-A3B-FP8",
            max_model_len=None,
            model_ref="x",
            config=None,
            expected={},
        ).status
        == "FAIL"
    )


def test_tool_calls_need_valid_json_arguments_and_reasoning_needs_both_parts() -> None:
    def response(message: dict[str, object]) -> dict[str, object]:
        return {"choices": [{"message": message}]}

    call = {"tool_calls": [{"function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]}
    assert check_tool_call(response(call)).status == "PASS"
    broken = {"tool_calls": [{"function": {"name": "get_weather", "arguments": '{"city": "Par'}}]}
    assert "not valid JSON" in check_tool_call(response(broken)).reason
    assert check_tool_call(response({"content": "It is sunny"})).reason == "no parsed tool call in the answer"
    assert check_reasoning(response({"reasoning_content": "think", "content": "Rayleigh"})).status == "PASS"
    assert check_reasoning(response({"content": "<think>x</think>Rayleigh"})).status == "FAIL"


def test_canaries_are_reproducible_and_carry_exact_answers() -> None:
    first = generate({"multiply": 2, "reverse": 1, "count_words": 1, "copy_list": 1}, seed=7)
    assert first == generate({"multiply": 2, "reverse": 1, "count_words": 1, "copy_list": 1}, seed=7)
    assert [p.id for p in first] == [
        "canary-multiply-1",
        "canary-multiply-2",
        "canary-reverse-1",
        "canary-count-words-1",
        "canary-copy-list-1",
    ]
    multiply = first[0]
    a, b = (int(w) for w in multiply.prompt.split("?")[0].split() if w.isdigit())
    assert multiply.expect is not None and multiply.expect.number == a * b
    reverse = first[2]
    word = reverse.prompt.split("'")[1]
    assert reverse.expect is not None and reverse.expect.contains == (word[::-1],)
