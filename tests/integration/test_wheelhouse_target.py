"""A wheelhouse for a runner unlike this machine, made here over the network: a Spark's (Python 3.12, aarch64, glibc
2.39) from whatever Python and platform runs the suite. Every file is the target's or pure Python, its markers were
read for the target, and pip, told the target's platform, installs each set from it with no index; a package with no
wheel for the target is named, never built here."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from pipeline.commands.wheelhouse import gate_set
from pipeline.errors import EngineError
from pipeline.infra.base_env import normalize
from pipeline.infra.wheel_target import Target
from pipeline.infra.wheelhouse import Wheelhouse, WheelSet, make_wheelhouse

pytestmark = pytest.mark.integration
SPARK = Target("3.12", "manylinux_2_39_aarch64")
# numpy only where the machine is aarch64: present in the Spark's set though this host is x86-64 (pip, resolving here,
# would read the marker for this host and leave it out)
MARKED = WheelSet("marked", ("numpy; platform_machine == 'aarch64'", "pywin32; sys_platform == 'win32'"))


def _tags(path: Path) -> list[str]:
    with zipfile.ZipFile(path) as wheel:
        (info,) = [n for n in wheel.namelist() if n.endswith(".dist-info/WHEEL")]
        text = wheel.read(info).decode()
    return [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Tag:")]


def test_the_gate_s_own_set_for_a_spark_is_aarch64_or_pure_and_installs_offline_for_that_platform(
    tmp_path: Path,
) -> None:
    dest = tmp_path / "wh"
    sets = [gate_set(), MARKED]

    def make(chosen: list[WheelSet], target: Target = SPARK) -> Wheelhouse:
        logs = tmp_path / "logs"
        return make_wheelhouse(
            chosen, dest, resolver_python=sys.executable, base=None, command="test", log_dir=logs, target=target
        )

    house = make(sets)
    assert house.index["target"] == {"python": "3.12", "platform": "manylinux_2_39_aarch64"}
    files = sorted((dest / "files").iterdir())
    assert files
    for path in files:
        tags = _tags(path)
        assert tags and all(t.endswith(("-any", "aarch64")) for t in tags), f"{path.name}: {tags}"
        pythons = {t.split("-")[0] for t in tags}
        assert pythons <= {"py2", "py3", "cp312"} or (
            pythons <= {"cp38", "cp39", "cp310", "cp311"} and "abi3" in tags[0]
        )
    natives = [p.name for p in files if not _tags(p)[0].endswith("-any")]
    assert natives, "the gate's set holds compiled wheels (pyyaml, rpds-py): some file must be aarch64"
    marked = {f["name"] for f in house.index["sets"][MARKED.key(None)]["files"]}
    assert marked == {"numpy"}  # the aarch64 marker held for the target, the win32 one did not
    for wheel_set in sets:  # pip reads markers for this host, so it is given the set's pins as well as its requirements
        pins = [f"{f['name']}=={f['version']}" for f in house.index["sets"][wheel_set.key(None)]["files"]]
        argv = [sys.executable, "-m", "pip", "install", "--dry-run", "--no-index", "--find-links", str(dest / "files")]
        argv += ["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp", "--abi", "cp312"]
        argv += [arg for tag in SPARK.platform_tags() for arg in ("--platform", tag)]
        argv += ["--target", str(tmp_path / "t"), "--report", str(tmp_path / "report.json")]
        argv += [*wheel_set.requirements, *pins]
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr[-2000:]
        report = json.loads((tmp_path / "report.json").read_text())
        installed = {normalize(i["metadata"]["name"]) for i in report["install"]}
        assert installed == {normalize(p.split("==")[0]) for p in pins}, wheel_set.name
    again = make(sets)
    assert again.index["sets"] == house.index["sets"]  # nothing fetched twice: the same files, the same digests
    other = make([MARKED])  # another profile's sets for the same runner: the earlier ones are kept beside them
    assert other.index["sets"] == house.index["sets"]
    for_x86 = make([MARKED], Target("3.12", "manylinux_2_28_x86_64"))
    assert [s["name"] for s in for_x86.index["sets"].values()] == ["marked"]  # another runner: nothing kept
    left_over = [p.name for p in (dest / "files").iterdir() if "x86_64" not in p.name and "-any" not in p.name]
    assert left_over == []


def test_a_package_without_a_wheel_for_the_target_is_named_and_nothing_is_built(tmp_path: Path) -> None:
    sdist_only = WheelSet("old-cli", ("docopt==0.6.2",))  # published as a source archive alone
    with pytest.raises(EngineError) as caught:
        make_wheelhouse(
            [sdist_only],
            tmp_path / "wh",
            resolver_python=sys.executable,
            base=None,
            command="test",
            log_dir=tmp_path / "logs",
            target=SPARK,
        )
    message = str(caught.value)
    assert message.startswith("old-cli cannot be made for Python 3.12 on manylinux_2_39_aarch64: ")
    assert "docopt" in message and "wheel" in message
    assert not list((tmp_path / "wh" / "files").iterdir())
