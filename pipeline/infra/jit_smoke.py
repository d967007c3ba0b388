"""Run at image build (no GPU there): can this image compile what a Spark compiles at first use?

Triton builds a small C launcher against Python's headers the first time a kernel runs, and
compiles kernels with ptxas; FlashInfer's JIT and torch.compile need a C++ compiler and nvcc. This
script proves each of those before the image is tagged: a C extension built against Python.h, and
a Triton kernel compiled to a cubin for the profile's architecture with the toolkit's ptxas.
Standalone: it runs in the image's python, never imports the pipeline. Usage: jit_smoke.py ARCH (e.g. 12.1a)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget

EXTENSION = '#include <Python.h>\nstatic struct PyModuleDef m = {PyModuleDef_HEAD_INIT, "probe", NULL, -1, NULL};\n'
EXTENSION += "PyMODINIT_FUNC PyInit_probe(void) { return PyModule_Create(&m); }\n"


def check_c_extension(work: Path) -> str:
    """What Triton's launcher does at a kernel's first launch: cc a shared object against Python.h."""
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise SystemExit("jit smoke: no C compiler (cc/gcc): install build-essential")
    source, target = work / "probe.c", work / "probe.so"
    source.write_text(EXTENSION)
    include = sysconfig.get_paths()["include"]
    if not (Path(include) / "Python.h").is_file():
        raise SystemExit(f"jit smoke: no Python.h in {include}: install python3-dev")
    subprocess.run([compiler, "-shared", "-fPIC", f"-I{include}", str(source), "-o", str(target)], check=True)
    return f"{Path(compiler).name} built a Python extension against {include}"


def check_toolkit() -> str:
    """nvcc and ptxas of the CUDA toolkit: FlashInfer's JIT and Triton (through TRITON_PTXAS_PATH) call them."""
    found = []
    for tool in ("nvcc", "ptxas"):
        toolkit = Path("/usr/local/cuda/bin") / tool
        path = shutil.which(tool) or (str(toolkit) if toolkit.exists() else None)
        if path is None:
            raise SystemExit(f"jit smoke: no {tool}: the image needs the CUDA toolkit (a -devel base image)")
        version = subprocess.run([path, "--version"], check=True, capture_output=True, text=True).stdout.strip()
        found.append(f"{tool} {version.splitlines()[-1]}")
    return "; ".join(found)


def check_triton(arch: str) -> str:
    """A Triton kernel compiled to a cubin for `arch` (12.1a -> sm_121a) with no GPU present."""

    @triton.jit  # type: ignore[untyped-decorator]
    def add(x, y, out, n, block: tl.constexpr):  # type: ignore[no-untyped-def]
        offsets = tl.program_id(0) * block + tl.arange(0, block)
        mask = offsets < n
        tl.store(out + offsets, tl.load(x + offsets, mask=mask) + tl.load(y + offsets, mask=mask), mask=mask)

    capability = int(arch.rstrip("af").replace(".", ""))
    signature = {"x": "*fp32", "y": "*fp32", "out": "*fp32", "n": "i32", "block": "constexpr"}
    source = triton.compiler.ASTSource(fn=add, signature=signature, constexprs={"block": 128})
    kernel = triton.compile(source, target=GPUTarget("cuda", capability, 32))
    cubin = kernel.asm.get("cubin", b"")
    if not cubin:
        raise SystemExit(f"jit smoke: Triton {triton.__version__} produced no cubin for sm_{capability}")
    return f"Triton {triton.__version__} compiled a kernel for sm_{capability} ({len(cubin)} bytes of cubin)"


def main() -> None:
    arch = sys.argv[1] if len(sys.argv) > 1 else "12.1a"
    with tempfile.TemporaryDirectory() as work:
        for line in (check_c_extension(Path(work)), check_toolkit(), check_triton(arch)):
            print(f"jit smoke: {line}")


if __name__ == "__main__":
    main()
