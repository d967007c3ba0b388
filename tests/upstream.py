"""What upstream really ships, pinned: vLLM's and FlashInfer's files on PyPI, fetched once by the test set-up into
the cache (checked against the hash pinned here and the one the index lists), never committed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pipeline.infra.files import sha256_of
from pipeline.infra.pypi import download_release_file
from pipeline.settings import from_environment


@dataclass(frozen=True)
class Upstream:
    """One file of one release on PyPI, with the sha256 it had when these tests were written."""

    project: str
    version: str
    filename: str
    sha256: str
    size: int

    def fetch(self) -> Path:
        """The file in the cache (downloaded on first use); a file whose bytes changed upstream fails loudly."""
        dest = from_environment().settings.places.cache / "upstream"
        path = download_release_file(self.project, self.version, self.filename, dest)
        digest = sha256_of(path)
        if digest != self.sha256:
            raise AssertionError(f"{self.filename}: sha256 {digest}, pinned {self.sha256}: the upstream file changed")
        return path


# vLLM's source release: the layout of main (requirements/build/cuda.txt, tools/use_existing_torch.py)
VLLM_SDIST = Upstream(
    "vllm", "0.33.0", "vllm-0.33.0.tar.gz", "f4c33c2503d52bb411146afa9618a4f48bed68912f617e6803ac8d76e4c74112", 47101396
)
# the wheel a Spark user installs from PyPI: _C/_moe_C for sm_80 .. sm_120f, and datacenter-only libraries
VLLM_AARCH64 = Upstream(
    "vllm",
    "0.33.0",
    "vllm-0.33.0-cp38-abi3-manylinux_2_28_aarch64.whl",
    "e9e404f52c8494b69bd83fe99fe7ecfa9f6b89fbd156d2a9639c24ea41d6d606",
    333472621,
)
# FlashInfer's precompiled kernels for datacenter Blackwell: about 16,000 cubins, all SM100-family
FLASHINFER_CUBIN = Upstream(
    "flashinfer-cubin",
    "0.6.13",
    "flashinfer_cubin-0.6.13-py3-none-any.whl",
    "41e4848c2d09d220e8394489b2fb6cfec6b6ad09f897b5ab8b39fc23055f6c24",
    457984995,
)
# the FlashInfer that vLLM 0.33.0 pins exactly
FLASHINFER_PYTHON = Upstream(
    "flashinfer-python",
    "0.7.2.post1",
    "flashinfer_python-0.7.2.post1-py3-none-any.whl",
    "bfdc18b9e1e4d8d0730fe4343dc0e284cd0c160086de80f99888bc4867922d49",
    62052965,
)
# a FlashInfer of another version than vLLM 0.33.0 pins, as tonight's FlashInfer `main` is on most nights
FLASHINFER_PYTHON_OTHER = Upstream(
    "flashinfer-python",
    "0.7.2",
    "flashinfer_python-0.7.2-py3-none-any.whl",
    "770550a0aa92b2f10e6c9a1f048dd43713f0f3bb6a12710186fcf8e4e9c99bd8",
    65195219,
)
