"""PR selections and the tests/docs rule of grafting, without git."""

from __future__ import annotations

import pytest

from pipeline.errors import ConfigError
from pipeline.stages.build.resolve import PullRequest, Source, is_non_code, parse_pull_request

VLLM = Source("vllm", "https://github.com/vllm-project/vllm.git", "main", (), "sources.vllm.prs")
HEAD = "0123456789abcdef0123456789abcdef01234567"


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("123", PullRequest(123, None)),
        ("#123", PullRequest(123, None)),
        ("https://github.com/vllm-project/vllm/pull/123", PullRequest(123, None)),
        ("https://github.com/VLLM-Project/vllm/pull/123/", PullRequest(123, None)),
        (f"123@{HEAD}", PullRequest(123, HEAD)),
        (f"https://github.com/vllm-project/vllm/pull/7@{HEAD.upper()}", PullRequest(7, HEAD)),
    ],
)
def test_a_pr_is_a_number_or_its_url_optionally_pinned(spec: str, expected: PullRequest) -> None:
    assert parse_pull_request(spec, VLLM) == expected


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("https://github.com/flashinfer-ai/flashinfer/pull/9", "belongs to flashinfer-ai/flashinfer, not to"),
        ("123@abc123", "a pinned head must be a full 40-character commit SHA"),
        ("pr-12", "write a PR as a number, #number or its URL"),
        ("0", "write a PR as a number"),
    ],
)
def test_a_bad_pr_selection_names_the_setting_and_what_to_write(spec: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_pull_request(spec, VLLM)
    text = str(caught.value.issues[0])
    assert text.startswith(f"sources.vllm.prs: {spec!r}: ") and message in text


@pytest.mark.parametrize(
    ("path", "non_code"),
    [
        ("tests/kernels/test_attention.py", True),
        ("docs/source/index.md", True),
        ("README.md", True),
        ("vllm/model_executor/layers/test/helpers.py", True),
        ("vllm/attention/backends/flashinfer.py", False),
        ("csrc/attention/attention_kernels.cu", False),
        ("setup.py", False),
        ("tests.py", False),
    ],
)
def test_only_tests_and_docs_may_keep_mains_side(path: str, non_code: bool) -> None:
    assert is_non_code(path) is non_code
