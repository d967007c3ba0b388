"""Build: each source into wheels through its builder, on the host or in a rendered build image, cached by content."""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import SparkNightlyError
from pipeline.infra import git as gitlib
from pipeline.infra import procs
from pipeline.infra.runtime import Runtime, ensure_pip_runtime
from pipeline.infra.supply import ensure_runtime
from pipeline.infra.wheel_cache import WheelCache, cache_key, copy_out
from pipeline.infra.wheelhouse import WheelSet
from pipeline.infra.wheels import read_metadata
from pipeline.infra.workshop import Workshop
from pipeline.progress import Say
from pipeline.stages.build.builders.base import Builder, BuildSource, Paths, Step, Toolchain
from pipeline.stages.build.kernel_carry import carry_kernels, kernel_carry, remember_kernels
from pipeline.stages.build.native_base import BuildDecision, BuildKind
from pipeline.stages.build.overlay import OverlayInputs, make_overlay
from pipeline.stages.build.preflight import build_checks, require

_SILENCE_S = 1800.0  # nvcc on one large kernel file can be quiet for many minutes
_IMAGE_PYTHON = "/opt/build/bin/python"
_IMAGE_UV = "/opt/build/bin/uv"
OVERLAY_REVISION = 1  # bump when the overlay's rules change: part of an overlay's cache key


@dataclass(frozen=True)
class BuildResult:
    """One source built (or found in the cache): its wheels in the night's folder."""

    family: str
    key: str
    cached: bool
    wheels: tuple[Path, ...]
    seconds: float  # this run's time: the whole build on a miss, the look-up and copy on a hit
    build_seconds: float  # what the build itself took when it ran
    kind: BuildKind = "native"
    why: str = ""
    decision: BuildDecision | None = None

    def short(self) -> str:
        """As a trial's or a bisection step's row says it: "vllm: overlay (20 s)", "vllm: cached overlay"."""
        if self.cached:
            return f"{self.family}: cached {self.kind}"
        return f"{self.family}: {self.kind} ({self.build_seconds:.0f} s)"


def host_identity() -> dict[str, str]:
    """The host toolchain that decides a wheel's bytes: interpreter, machine, and nvcc when there is one."""
    identity = {"python": platform.python_version(), "machine": platform.machine()}
    nvcc = shutil.which("nvcc")
    if nvcc:
        identity["nvcc"] = procs.capture([nvcc, "--version"], timeout_s=60).strip().splitlines()[-1]
    return identity


def source_key(
    builder: Builder,
    source: BuildSource,
    toolchain: Toolchain,
    host: dict[str, str],
    decision: BuildDecision | None = None,
) -> str:
    """The cache key: the source's bytes, the builder's steps, the toolchain; never a date or a branch name. An
    overlay's key is its tree and its base wheel's bytes: no compiler touches it."""
    if decision is not None and decision.base is not None:
        return cache_key(
            {
                "overlay": OVERLAY_REVISION,
                "family": builder.family,
                "source": source.identity,
                "commit": source.commit,
                "base": decision.base.sha256,
                "base_commit": decision.base.commit,
            }
        )
    return cache_key(
        {
            "builder": builder.family,
            "revision": builder.revision,
            "source": source.identity,
            "label": source.version_label,
            "toolchain": toolchain.identity(host),
        }
    )


def build_source(  # noqa: PLR0913 -- the build's folders and limits, by keyword
    builder: Builder,
    source: BuildSource,
    toolchain: Toolchain,
    *,
    cache: WheelCache,
    work_dir: Path,
    out_dir: Path,
    shop: Workshop,
    min_free_gib: int = 0,
    decision: BuildDecision | None = None,
    why: str = "native build",
) -> BuildResult:
    """Wheels for one source: from the cache when its key is there, else built (an overlay on its native base where
    `decision` says so; else natively, once the runner has what the build needs: see preflight), checked and
    stored. `why` is said of a build with no decision; the workshop's supply gives the build environment's files."""
    say = shop.say
    started = time.monotonic()
    work_dir = work_dir.absolute()  # git runs in the mirror: a relative worktree path would be the mirror's
    overlay = decision is not None and decision.kind == "overlay"
    key = source_key(builder, source, toolchain, host_identity(), decision if overlay else None)
    kind: BuildKind = "overlay" if overlay else "native"
    why = decision.why if decision is not None else why
    entry = cache.lookup(key)
    if entry is not None:
        wheels = copy_out(entry, out_dir)
        say(f"{builder.family}: cache hit {key}: nothing to build ({', '.join(w.name for w in wheels)})")
        seconds = time.monotonic() - started
        why = str(entry.inputs.get("why", why))  # what the build that made them said (carried kernels, ...)
        return BuildResult(builder.family, key, True, tuple(wheels), seconds, entry.build_seconds, kind, why, decision)
    if overlay:
        assert decision is not None
        return _build_overlay(
            builder, source, decision, key=key, cache=cache, work_dir=work_dir, out_dir=out_dir, say=say
        )
    say(f"{builder.family}: no cached build for {key}: building {source.identity} ({why})")
    root = source.materialize(work_dir / f"src-{builder.family}")
    staging = work_dir / f"out-{builder.family}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    carry = kernel_carry(builder, source, toolchain, root, cache, host_identity())
    if carry is not None:
        why = f"{why}; {carry.why()}"
        say(f"{builder.family}: {carry.why()}")
    skipped = carry.families if carry is not None and carry.earlier is not None else ()
    try:
        expected = _run_native_steps(
            builder,
            source,
            toolchain,
            root=root,
            staging=staging,
            work_dir=work_dir,
            shop=shop,
            min_free_gib=min_free_gib,
            skipped=skipped,
        )
    finally:
        source.release(work_dir / f"src-{builder.family}")
    built = sorted(staging.glob("*.whl"))
    if carry is not None and carry.earlier is not None:
        built = sorted([*built, *carry_kernels(carry, built, staging, source.epoch or 0)])
    _check_families(builder, built, expected)
    build_seconds = time.monotonic() - started
    if carry is not None and carry.earlier is None and source.commit is not None:
        remember_kernels(carry, built, cache, source.commit, build_seconds)
    inputs = {"source": source.identity, "label": source.version_label, "why": why}
    stored = cache.store(key, built, inputs, build_seconds)
    wheels = copy_out(stored, out_dir)
    shutil.rmtree(staging, ignore_errors=True)
    say(f"{builder.family}: built {', '.join(w.name for w in wheels)} in {build_seconds:.0f} s (cached as {key})")
    seconds = time.monotonic() - started
    return BuildResult(builder.family, key, False, tuple(wheels), seconds, build_seconds, "native", why, decision)


def _run_native_steps(  # noqa: PLR0913 -- the build's folders and limits, by keyword
    builder: Builder,
    source: BuildSource,
    toolchain: Toolchain,
    *,
    root: Path,
    staging: Path,
    work_dir: Path,
    shop: Workshop,
    min_free_gib: int,
    skipped: Sequence[str],
) -> tuple[str, ...]:
    """The preflight, then each step of the builder but those of the `skipped` families (kernels carried from an
    earlier build), here or in the build image; returns the families the source must yield."""
    say = shop.say
    rust = builder.rust_channel(root) is not None
    compiles = builder.compiles(root, toolchain)
    checks = build_checks(toolchain, work_dir, min_free_gib=min_free_gib, rust=rust, compiles=compiles)
    for check in checks:
        state = "ok" if check.ok else ("MISSING" if check.required else "missing (optional)")
        say(f"{builder.family}: preflight {check.name}: {state}: {check.found}")
    require(checks)
    requirements = builder.build_requirements(root, toolchain)
    if toolchain.mode == "docker":
        steps = [s for s in builder.steps(root, source, toolchain, image_paths()) if s.produces not in skipped]
        _build_in_image(steps, builder.rust_channel(root), toolchain, requirements, root, staging, work_dir, say)
    else:
        runtime = build_runtime(builder.family, requirements, toolchain, shop, work_dir, compiles=compiles)
        paths = Paths(str(runtime.python), str(runtime.bin("uv")), str(staging))
        for step in builder.steps(root, source, toolchain, paths):
            if step.produces not in skipped:
                _run_logged(step.name, step.argv, work_dir, toolchain, say, env=dict(step.env), cwd=root / step.cwd)
    return builder.families(root, toolchain.cuda_arch)


def build_set(family: str, requirements: Sequence[str]) -> WheelSet:
    """A source's build environment as a wheelhouse holds it: its pins hold as the tree writes them, over the base
    too (a build backend that needs setuptools>=77 gets it, whatever setuptools the base has)."""
    return WheelSet(f"build-{family}", tuple(requirements))


def build_runtime(
    family: str,
    requirements: Sequence[str],
    toolchain: Toolchain,
    shop: Workshop,
    log_dir: Path,
    *,
    compiles: bool = True,
) -> Runtime:
    """The build environment on the host: pip with the network and the toolchain's torch index for a build that
    compiles (its natives against the torch the candidate installs); for one that compiles nothing (gpu-built's
    flashinfer-python), the night's supply where the runner has a wheelhouse or a base (offline: its set)."""
    wanted = build_set(family, requirements)
    if shop.supply.plain or compiles:
        return ensure_pip_runtime(wanted.name, wanted.requirements, (), shop, log_dir, index_urls=toolchain.index_urls)
    return ensure_runtime(wanted, shop, log_dir)


def _build_overlay(
    builder: Builder,
    source: BuildSource,
    decision: BuildDecision,
    *,
    key: str,
    cache: WheelCache,
    work_dir: Path,
    out_dir: Path,
    say: Say,
) -> BuildResult:
    """Tonight's Python tree over the base wheel's natives: no compiler, no build environment."""
    started = time.monotonic()
    base = decision.base
    assert base is not None and source.mirror is not None and source.commit is not None
    say(f"{builder.family}: {decision.why}: making the overlay ({key})")
    mirror = gitlib.Git(source.mirror)
    base_files = frozenset(mirror.paths("ls-tree", "-r", "--name-only", "--full-tree", base.commit))
    root = source.materialize(work_dir / f"src-{builder.family}")
    staging = work_dir / f"out-{builder.family}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        inputs = OverlayInputs(base.wheel, root, base_files, source.commit, base.commit, source.epoch or 0)
        built = [make_overlay(inputs, staging)]
    finally:
        source.release(work_dir / f"src-{builder.family}")
    build_seconds = time.monotonic() - started
    stored = cache.store(
        key, built, {"source": source.identity, "overlay_on": base.sha256, "why": decision.why}, build_seconds
    )
    wheels = copy_out(stored, out_dir)
    shutil.rmtree(staging, ignore_errors=True)
    say(f"{builder.family}: overlay {wheels[0].name} in {build_seconds:.0f} s (cached as {key})")
    seconds = time.monotonic() - started
    return BuildResult(
        builder.family, key, False, tuple(wheels), seconds, build_seconds, "overlay", decision.why, decision
    )


def _build_in_image(
    steps: Sequence[Step],
    rust: str | None,
    toolchain: Toolchain,
    requirements: Sequence[str],
    root: Path,
    staging: Path,
    work_dir: Path,
    say: Say,
) -> None:
    """The Spark path: the same steps, each in `docker run` of a build image rendered from the same requirements."""
    dockerfile = render_build_dockerfile(toolchain, requirements, rust)
    image = build_image_tag(dockerfile)
    context = work_dir / "build-image"
    context.mkdir(parents=True, exist_ok=True)
    (context / "Dockerfile").write_text(dockerfile)
    _run_logged("build-image", ["docker", "build", "-t", image, str(context)], work_dir, toolchain, say)
    ccache = str(toolchain.ccache_dir) if toolchain.ccache_dir else None
    for step, argv in zip(
        steps,
        docker_commands(steps, image=image, source_dir=str(root), out_dir=str(staging), ccache_dir=ccache),
        strict=True,
    ):
        _run_logged(step.name, argv, work_dir, toolchain, say)


def build_image_tag(dockerfile: str) -> str:
    """Content-addressed: a changed toolchain is a new image, an unchanged one is reused."""
    return f"spark-nightly/build:{hashlib.sha256(dockerfile.encode()).hexdigest()[:16]}"


def _run_logged(
    name: str,
    argv: Sequence[str],
    work_dir: Path,
    toolchain: Toolchain,
    say: Say,
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> None:
    say(f"  {name}: {' '.join(argv)}  (log: {work_dir / f'build-{name}.log'})")
    if toolchain.ccache_dir is not None:
        toolchain.ccache_dir.mkdir(parents=True, exist_ok=True)
    procs.run(
        argv,
        work_dir / f"build-{name}.log",
        timeout_s=toolchain.timeout_s,
        inactivity_s=_SILENCE_S,
        env=dict(os.environ) | (env or {}),
        cwd=cwd,
    )


def _check_families(builder: Builder, wheels: Sequence[Path], expected: Sequence[str]) -> None:
    names = [read_metadata(wheel).name for wheel in wheels]
    if sorted(names) != sorted(expected):
        raise SparkNightlyError(
            f"the {builder.family} build wrote {', '.join(names) or 'no wheel'}; expected one each of "
            f"{', '.join(expected)}"
        )


def render_build_dockerfile(toolchain: Toolchain, requirements: Sequence[str], rust: str | None = None) -> str:
    """The build image: the CUDA devel base, ccache, a venv holding exactly the build requirements, and the Rust
    toolchain the source pins (vLLM's optional frontend: without cargo, setuptools-rust skips it with a warning)."""
    base = toolchain.base_image or "nvidia/cuda:13.0.1-devel-ubuntu24.04"
    indexes = " ".join(f"--extra-index-url {url}" for url in toolchain.index_urls)
    rust_lines = [
        "RUN curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal "
        f"--default-toolchain {rust}",
        "ENV PATH=/root/.cargo/bin:$PATH",
    ]
    return "\n".join(
        [
            "# syntax=docker/dockerfile:1",
            "# spark-nightly build image: the toolchain of the cache key, nothing else",
            f"FROM {base}",
            "ENV DEBIAN_FRONTEND=noninteractive",
            "RUN apt-get update && apt-get install -y --no-install-recommends git ccache curl ca-certificates python3 "
            "python3-venv python3-dev && rm -rf /var/lib/apt/lists/*",
            *(rust_lines if rust else []),
            f"RUN python3 -m venv /opt/build && /opt/build/bin/pip install {indexes} "
            + " ".join(f"'{r}'" for r in requirements),
            "",
        ]
    ).replace("install  ", "install ")


def docker_commands(
    steps: Sequence[Step], *, image: str, source_dir: str, out_dir: str, ccache_dir: str | None
) -> list[list[str]]:
    """`docker run` per step: the source, the output folder and ccache mounted; no network needed after the image."""
    commands = []
    for step in steps:
        argv = ["docker", "run", "--rm", "-v", f"{source_dir}:/src", "-v", f"{out_dir}:/out"]
        if ccache_dir:
            argv += ["-v", f"{ccache_dir}:/ccache"]
        for name, value in sorted(step.env.items()):
            argv += ["-e", f"{name}={'/ccache' if name == 'CCACHE_DIR' else value}"]
        argv += ["-w", "/src" if step.cwd == "." else f"/src/{step.cwd}", image, *step.argv]
        commands.append(argv)
    return commands


def image_paths() -> Paths:
    """Where the build image keeps its interpreter and uv, and where the output folder is mounted."""
    return Paths(_IMAGE_PYTHON, _IMAGE_UV, "/out")
