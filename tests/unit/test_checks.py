"""The golden checks as pure functions, fed with recorded outputs (real shapes of vLLM answers)."""

from __future__ import annotations

import base64
import math
from dataclasses import replace
from pathlib import Path

from pipeline.checks.agreement import check_batch_invariance, check_determinism, check_drift, check_judged, unjudged
from pipeline.checks.answers import check_answer, check_corrupted_counter, check_finite_logprobs
from pipeline.checks.features import (
    check_forced_call,
    check_image,
    check_json_schema,
    check_optional_call,
    red_square_png,
)
from pipeline.checks.garbage import check_garbage, check_long_decode, text_stats, token_stats
from pipeline.checks.identity import check_identity, identity_files
from pipeline.checks.stops import check_stop, invented_turn
from pipeline.checks.tools import check_reasoning
from pipeline.config.canaries import generate
from pipeline.config.golden_sets import Expectation
from pipeline.infra.openai_client import Generation, Scored, ServedModel, scored_position

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


def test_long_decode_allows_a_good_models_late_repetition_but_not_a_confident_loop_or_collapse() -> None:
    words = [" the", " river", " runs", " to", " the", " sea", " and", " back"] * 20
    story = [f" w{i}" for i in range(64)]
    # a sentence of eight tokens said again and again: a good small model's late repetition
    repeating_tail = _long(story + words[:96], [-0.5] * 64 + [-0.1] * 96)
    assert check_long_decode(repeating_tail, window=32).status == "PASS"
    looping_tail = _long(story + [" again"] * 96, [-0.5] * 64 + [-0.1] * 96)
    verdict = check_long_decode(looping_tail, window=32)
    assert verdict.status == "FAIL" and verdict.reason.startswith("tail: degenerate: ")
    collapsed = _long(story + ["ж", "ッ", "ק", "ʘ"] * 24, [-0.5] * 64 + [-7.0] * 96)
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


def _scored(logprobs: tuple[float | None, ...], best: tuple[float | None, ...] | None = None) -> Scored:
    return Scored(logprobs, best if best is not None else logprobs)


def test_drift_scores_the_reference_answer_again_tonight() -> None:
    same = check_drift(GOOD, GOOD, _scored(GOOD.logprobs))
    assert same.status == "PASS"
    assert (
        same.reason == "tokens identical; the reference night's 7 tokens scored under tonight's build within 0.1 nats"
    )
    moved = check_drift(GOOD, GOOD, _scored(tuple(v - 0.5 for v in GOOD.logprobs)), reference_night="2026-11-20")
    assert moved.status == "FAIL" and "moved by 0.500 nats" in moved.reason
    assert moved.evidence["reference_night"] == "2026-11-20" and moved.evidence["rescored_mean_abs_diff"] == 0.5
    foreign = _variant((*GOOD.tokens[:5], " Lyon", "."), GOOD.logprobs, tuple({t: 0.0} for t in GOOD.tokens))
    assert "neither is in the other's top-5" in check_drift(foreign, GOOD, _scored(GOOD.logprobs)).reason
    nan = check_drift(GOOD, GOOD, _scored((None, *GOOD.logprobs[1:])))
    assert nan.status == "FAIL" and "1 of the reference night's tokens score non-finite tonight" in nan.reason


def test_a_different_answer_after_a_near_tie_at_token_0_is_caught_by_the_rescored_reference() -> None:
    # tonight starts with "Paris" where the reference started with "The": each in the other's top-5, so the token
    # rule alone has nothing more to compare; the reference's answer scored tonight shows how far the numbers moved
    tops = tuple({"The": -0.7, "Paris": -0.69} for _ in range(4))
    tonight = Generation("france", "Paris, of course", ("Paris", ",", " of", " course"), (-0.69, -2, -2, -2), tops)
    reference = Generation(
        "france", "The capital", ("The", " capital", " is", " Paris"), (-0.7, -0.1, -0.1, -0.1), tops
    )
    assert check_drift(tonight, reference, None).status == "PASS"  # what the token rule alone concluded
    verdict = check_drift(tonight, reference, _scored((-0.7, -2.5, -3.0, -4.0)))
    assert verdict.status == "FAIL" and verdict.evidence["first_divergence"] == 0
    assert "over the reference night's 4 tokens scored under tonight's build" in verdict.reason


def test_a_night_without_reference_is_judged_or_left_unjudged() -> None:
    agree = check_judged(
        GOOD, _scored(tuple(v + 0.001 for v in GOOD.logprobs)), judge="hf", tolerance=0.02, margin=0.05
    )
    assert agree.status == "PASS" and agree.reason == "no reference; hf agrees on all 7 tokens"
    scaled = check_judged(GOOD, _scored(tuple(v * 5 for v in GOOD.logprobs)), judge="hf", tolerance=0.02, margin=0.05)
    assert scaled.status == "FAIL" and "logprobs differ from hf by" in scaled.reason
    # the judge would have chosen another token at position 5: it puts " Paris" 2 nats below its best
    own = (*GOOD.logprobs[:5], -2.05, GOOD.logprobs[6])
    best = (*GOOD.logprobs[:5], -0.05, GOOD.logprobs[6])
    other = check_judged(replace(GOOD, logprobs=own), _scored(own, best), judge="hf", tolerance=0.02, margin=0.05)
    assert other.status == "FAIL" and "hf would not have chosen 1 of 7 tokens; the first is token 5 (' Paris')" in (
        other.reason
    )
    assert unjudged(GOOD, "no reference night and no judge").status == "INCONCLUSIVE"
    assert unjudged(GOOD, "x").passed  # not a failure of the night, but never recorded as its reference


def test_a_judged_answer_keeps_what_it_said_and_where_the_judge_differed_most() -> None:
    # the split model's two-plus-two (docs/gpu.md): a reader of the alert needs the answer and its worst token
    judged = _scored((-0.01, -0.2, -0.001, -0.02, -0.03, -0.27, -0.3))
    verdict = check_judged(GOOD, judged, judge="hf", tolerance=0.02, margin=0.05)
    assert verdict.status == "FAIL"
    assert verdict.evidence["answer"] == "The capital of France is Paris."
    assert verdict.evidence["judge_largest_at"] == 5 and verdict.evidence["judge_largest_token"] == " Paris"
    assert (verdict.evidence["judge_largest_served"], verdict.evidence["judge_largest_judged"]) == (-0.05, -0.27)


def test_scored_positions_read_the_token_and_the_best_of_vllm_prompt_logprobs() -> None:
    position = {"42": {"logprob": -1.5, "rank": 3, "decoded_token": " a"}, "7": {"logprob": -0.2, "rank": 1}}
    assert scored_position(position, 42) == (-1.5, -0.2)
    assert scored_position(None, 42) == (None, None)


def test_answers_that_should_finish_must_stop_without_inventing_a_turn() -> None:
    assert check_stop(GOOD, should_stop=True, max_tokens=24).status == "PASS"
    endless = replace(GOOD, text="The capital of France is Paris.\nuser\nWhat about Spain?", finish_reason="length")
    verdict = check_stop(endless, should_stop=True, max_tokens=24)
    assert verdict.status == "FAIL"
    assert "ran to max_tokens (7 of 24 tokens, finish_reason 'length') instead of stopping" in verdict.reason
    assert "invents a new turn: ' of France is Paris.\\nuser\\nWhat about Spain?'" in verdict.reason
    marker = replace(GOOD, text="Paris.<|im_start|>assistant", finish_reason="stop")
    assert "invents a new turn" in check_stop(marker, should_stop=True, max_tokens=24).reason
    assert check_stop(endless, should_stop=False, max_tokens=24).status == "SKIPPED"
    assert invented_turn("Users of the metro say it is fast.") is None  # a word, not a speaker


def test_confident_loops_fail_as_degenerate_in_answers_and_long_decodes() -> None:
    loop_tokens = (" piece", " and", " piece", ".") * 6
    loop = Generation("p", "".join(loop_tokens), loop_tokens, tuple(-0.01 for _ in loop_tokens), (), "length")
    verdict = check_garbage(loop)
    assert verdict.status == "FAIL" and "degenerate: " in verdict.reason
    assert verdict.evidence["distinct_token_share"] == round(3 / 24, 3)
    stats = token_stats((" (", " piece") * 192)
    assert stats.repeated_ngram_share > 0.97 and stats.distinct_share < 0.01


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


def test_a_forced_call_must_parse_and_validate_and_an_optional_one_must_not_leak_markup() -> None:
    def response(message: dict[str, object]) -> dict[str, object]:
        return {"choices": [{"message": message}]}

    def call(arguments: str, name: str = "get_weather") -> dict[str, object]:
        return {"tool_calls": [{"function": {"name": name, "arguments": arguments}}]}

    assert check_forced_call(response(call('{"city": "Paris"}')), "required").status == "PASS"
    assert "is not JSON" in check_forced_call(response(call('{"city": "Par')), "named").reason
    assert "does not validate" in check_forced_call(response(call('{"town": "Paris"}')), "named").reason
    assert "called 'get_time'" in check_forced_call(response(call('{"city": "x"}', "get_time")), "named").reason
    unparsed = check_forced_call(response({"content": '<tool_call>{"name": "get_weather"'}), "required")
    assert unparsed.status == "FAIL" and "no parsed tool call; the answer was '<tool_call>" in unparsed.reason
    assert check_optional_call(response({"content": "It is sunny in Paris."})).status == "PASS"
    assert check_optional_call(response(call('{"city": "Paris"}'))).status == "PASS"
    leaked = check_optional_call(response({"content": '<tool_call>\n{"name": "get_weather"}'}))
    assert leaked.status == "FAIL" and "a call the parser missed" in leaked.reason
    assert check_optional_call(response({"content": ""})).status == "FAIL"
    assert check_reasoning(response({"reasoning_content": "think", "content": "Rayleigh"})).status == "PASS"
    assert check_reasoning(response({"content": "<think>x</think>Rayleigh"})).status == "FAIL"


def test_a_json_schema_answer_must_validate_and_an_image_answer_must_name_the_colour() -> None:
    def response(content: str) -> dict[str, object]:
        return {"choices": [{"message": {"content": content}}]}

    assert check_json_schema(response('{"country": "France", "capital": "Paris"}')).status == "PASS"
    assert "does not validate" in check_json_schema(response('{"capital": "Paris"}')).reason
    assert "is not JSON" in check_json_schema(response("The capital is Paris.")).reason
    assert check_image(response("Red.")).status == "PASS" and check_image(response("Blue")).status == "FAIL"
    png = base64.b64decode(red_square_png(4).split(",", 1)[1])
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and b"IHDR" in png and png.endswith(b"IEND\xaeB`\x82")


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


def test_identity_fails_a_folder_whose_config_or_tokenizer_is_not_the_pinned_one(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"rope_theta": 100000}')
    (tmp_path / "tokenizer.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"weights are not identity files")
    files = identity_files(tmp_path)
    assert sorted(files) == ["config.json", "tokenizer.json"]
    served = [ServedModel("org/m", 2048, str(tmp_path))]
    common = {"name": "org/m", "max_model_len": 2048, "model_ref": str(tmp_path), "config": {}, "expected": {}}
    assert check_identity(served, files=files, expected_files=files, **common).status == "PASS"  # type: ignore[arg-type]
    pinned = dict(files) | {"config.json": "0" * 64}
    verdict = check_identity(
        served,
        files=files,
        expected_files=pinned,
        files_from="the reference night 2026-11-20",
        **common,  # type: ignore[arg-type]
    )
    assert verdict.status == "FAIL"
    assert (
        verdict.reason
        == f"config.json has sha256 {files['config.json'][:12]}, the reference night 2026-11-20 pins 000000000000"
    )
    assert identity_files(tmp_path / "absent") == {}


def test_identity_reads_nested_config_keys_by_their_dotted_path() -> None:
    served = [ServedModel("org/m", None, "/m")]
    config = {"rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}}
    verdict = check_identity(
        served,
        name="org/m",
        max_model_len=None,
        model_ref="/m",
        config=config,
        expected={"rope_parameters.rope_theta": 100000.0, "rope_scaling.factor": 2},
    )
    assert verdict.reason == (
        "config.json rope_parameters.rope_theta is 10000.0, models.yaml expects 100000.0; "
        "config.json rope_scaling.factor is None, models.yaml expects 2"
    )
