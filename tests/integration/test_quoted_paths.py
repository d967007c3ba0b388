"""Paths exactly as git stores them: a native source whose name git would quote (non-ASCII, a '"') is still native.

Without -z, `git diff --name-only` prints `"csrc/\\303\\251.cu"`, which starts with no native prefix: tonight's
Python would have been overlaid on old natives, and FlashInfer's kernel-carry digest would have missed the file.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.infra.git import Git
from pipeline.stages.build.native_inputs import native_digest, tree_change
from tests.gitrepos import Upstream

pytestmark = pytest.mark.integration

NAMES = ("csrc/\u00e9.cu", 'csrc/say "hi".cu', "csrc/tab\there.cu")


@pytest.mark.parametrize("name", NAMES)
def test_a_native_source_git_would_quote_is_native_and_in_the_digest(tmp_path: Path, name: str) -> None:
    upstream = Upstream(tmp_path)
    base = upstream.commit({"vllm/__init__.py": "", name: "// one\n"}, "base")
    tonight = upstream.commit({name: "// two\n"}, "change the kernel")
    repo = upstream.work
    change = tree_change("vllm", Git(repo), base, tonight)
    assert change.changed == (name,) and change.native == (name,), change
    assert change.describe() == f"{name} changed"
    assert native_digest("vllm", Git(repo), base) != native_digest("vllm", Git(repo), tonight)
    assert name in Git(repo).paths("ls-tree", "-r", "--name-only", "--full-tree", tonight)
