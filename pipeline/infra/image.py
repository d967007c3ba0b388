"""The runtime image for a Spark: a Dockerfile rendered from the profile and the lock, built from tested wheels."""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.config.matrix import Profile
from pipeline.infra.runtime import LockedFile

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
            "RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-pip "
            "&& rm -rf /var/lib/apt/lists/*",
            "COPY wheels/ /opt/spark-nightly/wheels/",
            "COPY lock.txt /opt/spark-nightly/lock.txt",
            "RUN python3 -m pip install --no-deps --require-hashes --no-index --find-links /opt/spark-nightly/wheels "
            "-r /opt/spark-nightly/lock.txt && rm -rf /opt/spark-nightly/wheels",
            f'RUN vllm --version && python3 -c "{cuda_check}"'
            if profile.accelerator == "cuda"
            else "RUN vllm --version",
            "",
        ]
    )
