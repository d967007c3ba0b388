"""A run's build.json: written once by the build, read back typed by the candidate stage and the release, and a
damaged one said with its file and the command that makes it again."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from pipeline.errors import ExitCode, UsageError
from pipeline.infra.files import sha256_of
from pipeline.infra.wheel_cache import BuiltWheel
from pipeline.stages.build.build_record import BuildRecord
from pipeline.stages.build.build_wheels import BuildResult
from tests.wheelfactory import make_wheel


def test_a_build_is_read_back_as_it_was_written_with_each_wheel_s_sha256_and_its_base(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "vllm", "0.26.0+g0123456.d20261129", {"vllm/x.py": b"x = 1\n"})
    base = tmp_path / "bases" / "vllm-0.26.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    decision = {"kind": "overlay", "why": "only Python changed (1 file)", "base": {"path": str(base), "sha256": "s"}}
    built = BuildResult("vllm", "k" * 24, False, (wheel,), 16.4321, 16.0, "overlay", "only Python changed (1 file)")
    record = BuildRecord.of([built])
    record.write(tmp_path / "build.json")
    (again,) = BuildRecord.read(tmp_path / "build.json").builds
    assert (again.family, again.cache_key, again.kind, again.seconds) == ("vllm", "k" * 24, "overlay", 16.432)
    assert again.wheels == (BuiltWheel(wheel.name, sha256_of(wheel), wheel.stat().st_size),)
    assert again.base_wheel is None  # no decision recorded: no base to name
    with_base = BuildRecord((replace(again, decision=decision),))
    with_base.write(tmp_path / "overlay.json")
    assert BuildRecord.read(tmp_path / "overlay.json").base_wheels == [base]


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("", "JSONDecodeError"),
        ('{"version": 7, "builds": []}', "version 7, this spark-nightly reads 1"),
        ('{"version": 1}', "KeyError: 'builds'"),
        ('{"version": 1, "builds": [{"family": "vllm"}]}', "KeyError: 'wheels'"),
        ('{"version": 1, "builds": [1]}', "TypeError"),
    ],
)
def test_a_damaged_build_record_is_said_with_its_file_and_the_command_that_makes_it(
    tmp_path: Path, text: str, said: str
) -> None:
    path = tmp_path / "20261129-010000" / "build.json"
    path.parent.mkdir()
    path.write_text(text)
    with pytest.raises(UsageError) as caught:
        BuildRecord.read(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: not a build record (") and said in message, message
    assert "run `spark-nightly build --run-id 20261129-010000` again" in message
    assert caught.value.exit_code == ExitCode.USAGE
