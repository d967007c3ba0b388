"""Convert spark-vllm-docker (v1) and sparkrun (v2) recipes into models.yaml entries, reporting what was dropped."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema

from pipeline.config.load import Document, display_name, format_path, parse_yaml, read_text, schema
from pipeline.config.rules import HARNESS_FLAGS
from pipeline.errors import ConfigError, ConfigIssue

# vLLM flags that map to typed serve options, with the type of their value (None: a boolean switch).
_VALUE_FLAGS: dict[str, tuple[str, type]] = {
    "--max-model-len": ("max_model_len", int),
    "--dtype": ("dtype", str),
    "--kv-cache-dtype": ("kv_cache_dtype", str),
    "--quantization": ("quantization", str),
    "-q": ("quantization", str),
    "--gpu-memory-utilization": ("gpu_memory_utilization", float),
    "--tensor-parallel-size": ("tensor_parallel_size", int),
    "-tp": ("tensor_parallel_size", int),
    "--pipeline-parallel-size": ("pipeline_parallel_size", int),
    "-pp": ("pipeline_parallel_size", int),
    "--tool-call-parser": ("tool_call_parser", str),
    "--reasoning-parser": ("reasoning_parser", str),
    "--attention-backend": ("attention_backend", str),
    "--served-model-name": ("served_model_name", str),
    "--max-num-seqs": ("max_num_seqs", int),
    "--max-num-batched-tokens": ("max_num_batched_tokens", int),
    "--load-format": ("load_format", str),
    "--distributed-executor-backend": ("distributed_executor_backend", str),
    "--speculative-config": ("speculative_config", dict),
    "--compilation-config": ("compilation_config", dict),
    "-cc": ("compilation_config", dict),
}
_SWITCHES = {
    "--enforce-eager": "enforce_eager",
    "--trust-remote-code": "trust_remote_code",
    "--enable-auto-tool-choice": "enable_auto_tool_choice",
    "--enable-prefix-caching": "enable_prefix_caching",
}
_SHELL_TOKENS = {"&&", "||", ";", "|", ">", "<"}
_VLLM_RUNTIMES = {"vllm", "vllm-ray", "vllm-distributed", "eugr-vllm"}  # sparkrun's names for vLLM


@dataclass
class ImportedRecipe:
    """One converted recipe: the models.yaml entry and what could not be carried over."""

    source: str
    entry: dict[str, Any]
    dropped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ImportOptions:
    """Choices the recipe format has no field for."""

    profile: str = "spark"
    golden: str = "spark-general"
    hardware: str = "spark-gb10"


def import_recipe(path: Path, options: ImportOptions = ImportOptions()) -> ImportedRecipe:
    """Read one recipe file and convert it, or raise ConfigError pointing into the recipe."""
    name = display_name(path)
    doc = parse_yaml(read_text(path, name), name)
    if not isinstance(doc.data, dict):
        raise ConfigError([doc.issue((), "a recipe is a mapping of keys (recipe_version, name, command, ...)")])
    version = str(doc.data.get("recipe_version", "1" if {"build_args", "mods"} & doc.data.keys() else "2"))
    if version not in ("1", "2"):
        raise ConfigError(
            [doc.issue(("recipe_version",), f'unsupported recipe_version {version!r}; expected "1" or "2"')]
        )
    runtime = str(doc.data.get("runtime") or "vllm")
    if runtime not in _VLLM_RUNTIMES:
        raise ConfigError(
            [doc.issue(("runtime",), f"runtime '{runtime}' is not vLLM; spark-nightly gates vLLM builds only")]
        )
    result = ImportedRecipe(name, {})
    command = _v1_command(doc) if version == "1" else _v2_command(doc)
    serve, model = _parse_command(doc, command, result)
    model = str(doc.data.get("model") or model or "")
    if not model:
        raise ConfigError([doc.issue(("command",), "no model: give 'model' or a model after 'vllm serve'")])
    if pooling := _pooling_model(serve, model):
        raise ConfigError(
            [
                doc.issue(
                    ("command",),
                    f"{pooling}: an embedding or scoring model has no chat answers for the golden and benchmark "
                    "checks; not imported",
                )
            ]
        )
    result.entry = _entry(doc, version=version, model=model, serve=serve, result=result, options=options)
    _check_entry(doc, result.entry)
    return result


def _v1_command(doc: Document) -> str:
    missing = [key for key in ("name", "container", "command") if key not in doc.data]
    if missing:
        raise ConfigError([doc.issue((), f"a v1 recipe needs '{key}'") for key in missing])
    return fill_template(doc, str(doc.data["command"]), _defaults(doc))


_TEMPLATE = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")


def fill_template(doc: Document, command: str, defaults: Mapping[str, Any]) -> str:
    """v1's placeholders filled by name: `{name}` from defaults, `{{` and `}}` for literal braces. Nothing else of
    str.format is honoured (no format specs, no attribute or index walks): a recipe is data, never code."""

    def fill(match: re.Match[str]) -> str:
        token = match.group(0)
        if token in ("{{", "}}"):
            return token[0]
        name = match.group(1)
        if name is None:
            raise _template_error(doc, f"a single '{token}' is not a placeholder; double literal braces: {{{{ }}}}")
        if not re.fullmatch(r"\w+", name):
            raise _template_error(doc, f"placeholder {{{name[:40]}}} is not a plain name; write {{name}} only")
        if name not in defaults:
            raise _template_error(doc, f"placeholder {{{name}}} has no value in 'defaults'; add it there")
        return str(defaults[name])

    return _TEMPLATE.sub(fill, command)


def _defaults(doc: Document) -> dict[str, Any]:
    defaults = doc.data.get("defaults") or {}
    if not isinstance(defaults, dict):
        raise ConfigError([doc.issue(("defaults",), "defaults is a mapping of placeholder names to values")])
    return {str(k): v for k, v in defaults.items()}


def _template_error(doc: Document, message: str) -> ConfigError:
    return ConfigError([doc.issue(("command",), message)])


def _v2_command(doc: Document) -> str:
    if "model" not in doc.data:
        raise ConfigError([doc.issue((), "a v2 recipe needs 'model'")])
    defaults = _defaults(doc)
    defaults.setdefault("model", doc.data["model"])
    command = doc.data.get("command")
    if not command:  # sparkrun builds the command from defaults; so do we, for the options we know
        flags = [
            f"--{key.replace('_', '-')} {{{key}}}" for key in defaults if f"--{key.replace('_', '-')}" in _VALUE_FLAGS
        ]
        switches = [
            f"--{key.replace('_', '-')}"
            for key, v in defaults.items()
            if v is True and f"--{key.replace('_', '-')}" in _SWITCHES
        ]
        command = " ".join(["vllm serve {model}", *flags, *switches])
    text = str(command)
    doubled_style = "{{" in text  # v2 writes JSON braces plainly; doubled ones are the deprecated v1 habit
    for _ in range(10):  # sparkrun substitutes until nothing changes; unknown placeholders stay as written
        replaced = re.sub(r"\{(\w+)\}", lambda m: str(defaults.get(m.group(1), m.group(0))), text)
        if replaced == text:
            break
        text = replaced
    return text.replace("{{", "{").replace("}}", "}") if doubled_style else text


def _parse_command(doc: Document, command: str, result: ImportedRecipe) -> tuple[dict[str, Any], str | None]:
    """Serve options and the model from a `vllm serve MODEL --flag value ...` command."""
    try:
        tokens = shlex.split(command.replace("\\\n", " "))
    except ValueError as exc:
        raise ConfigError([doc.issue(("command",), f"cannot split the command like a shell would: {exc}")]) from None
    start = _serve_start(tokens)
    if start is None:
        raise ConfigError([doc.issue(("command",), "no 'vllm serve' (or the OpenAI API server module) in the command")])
    if start[0]:
        result.dropped.append(f"commands before vllm serve: {' '.join(tokens[: start[0]])}")
    tokens = tokens[start[1] :]
    model = tokens.pop(0) if tokens and not tokens[0].startswith("-") else None
    serve: dict[str, Any] = {}
    extra: list[str] = []
    while tokens:
        token = tokens.pop(0)
        if token in _SHELL_TOKENS:
            result.dropped.append(f"shell after the serve command: {' '.join([token, *tokens])}")
            break
        flag, _, inline = token.partition("=")
        if flag in _SWITCHES:
            serve[_SWITCHES[flag]] = True
        elif flag in _VALUE_FLAGS or flag in HARNESS_FLAGS:
            value = inline if inline else (tokens.pop(0) if tokens else "")
            if flag not in _VALUE_FLAGS:  # set by the harness (validate refuses it in extra_args)
                if flag == "--model":
                    model = value
                elif flag == "--api-key":  # a secret: never repeated in what import prints
                    result.dropped.append(f"{flag} (the harness makes a key for each boot; the value is not shown)")
                else:
                    result.dropped.append(f"{flag} {value} (the harness chooses it)")
                continue
            key, kind = _VALUE_FLAGS[flag]
            serve[key] = "auto" if key == "max_model_len" and value == "auto" else _convert(doc, flag, value, kind)
        else:
            extra.append(token)
            if not inline and tokens and not tokens[0].startswith("-"):
                extra.append(tokens.pop(0))
    if extra:
        serve["extra_args"] = extra
        result.notes.append(f"kept as serve.extra_args, not checked by the schema: {' '.join(extra)}")
    return serve, model


_POOLING_FLAGS = {"--task", "--runner", "--convert"}
_POOLING_VALUES = {"embed", "embedding", "score", "classify", "reward", "pooling", "rerank"}


def _pooling_model(serve: Mapping[str, Any], model: str) -> str | None:
    """Why the model is not a chat model (a vLLM pooling runner, or an embedding or reranker by name), else None."""
    extra = [str(a) for a in serve.get("extra_args", ())]
    for index, argument in enumerate(extra):
        flag, _, inline = argument.partition("=")
        value = inline or (extra[index + 1] if index + 1 < len(extra) else "")
        if flag in _POOLING_FLAGS and value.lower() in _POOLING_VALUES:
            return f"{flag} {value}"
    if re.search(r"embed|rerank", model, re.IGNORECASE):
        return f"{model} is named an embedding or reranker model"
    return None


def _serve_start(tokens: list[str]) -> tuple[int, int] | None:
    """(index where the serve command starts, index of its first argument)."""
    for i, token in enumerate(tokens):
        if token.endswith("vllm") and i + 1 < len(tokens) and tokens[i + 1] == "serve":
            return i, i + 2
        if token == "vllm.entrypoints.openai.api_server":
            return max(i - 2, 0), i + 1
    return None


def _convert(doc: Document, flag: str, value: str, kind: type) -> Any:
    try:
        if kind is dict:
            return json.loads(value)
        return kind(value)
    except ValueError as exc:
        raise ConfigError(
            [doc.issue(("command",), f"{flag} {value!r} is not a valid {kind.__name__}: {exc}")]
        ) from None


def _entry(
    doc: Document, *, version: str, model: str, serve: dict[str, Any], result: ImportedRecipe, options: ImportOptions
) -> dict[str, Any]:
    data = doc.data
    name = str(data.get("name") or model.rsplit("/", maxsplit=1)[-1])
    parallel = int(serve.get("tensor_parallel_size", 1)) * int(serve.get("pipeline_parallel_size", 1))
    cluster = _is_cluster(data, version, parallel, result)
    entry: dict[str, Any] = {"id": _slug(name), "model": model}
    if data.get("description"):
        entry["description"] = str(data["description"])
    if data.get("model_revision"):
        entry["revision"] = str(data["model_revision"])
    else:  # validate refuses a Hub entry on a GPU profile without one
        result.notes.append(f"pin revision: to the commit you test (https://huggingface.co/{model}/commits/main)")
    entry["profile"] = options.profile
    entry["launch"] = {"target": "ray" if cluster else "docker"}  # the image of tonight's tested wheels
    if data.get("container"):
        result.notes.append(
            f"the recipe's container {data['container']} is not used: the entry runs tonight's build in the runtime "
            "image made from its wheels (launch.image is left unset on purpose)"
        )
    if not cluster:
        for key in ("tensor_parallel_size", "pipeline_parallel_size", "distributed_executor_backend"):
            if key in serve:
                result.dropped.append(f"serve.{key}={serve.pop(key)} (one Spark has one GPU; solo runs unsplit)")
    elif serve.get("distributed_executor_backend", "ray") != "ray":
        result.notes.append(f"distributed_executor_backend {serve['distributed_executor_backend']} replaced by ray")
        serve["distributed_executor_backend"] = "ray"
    if serve:
        entry["serve"] = serve
    env = data.get("env") or {}
    if env:
        entry["env"] = {str(k): str(v) for k, v in env.items()}
    entry["topology"] = (
        {"mode": "cluster", "nodes": max(parallel, int(data.get("min_nodes", 2)))} if cluster else {"mode": "solo"}
    )
    entry["golden"] = options.golden
    entry["bench"] = _bench(data, result)
    entry["required"] = False
    result.notes.append("imported as an optional entry (required: false); make it required once it has passed")
    result.notes.append(f"add thresholds/{options.hardware}/{entry['id']}.yaml with a measured reference for each cell")
    for key in ("mods", "build_args"):
        if data.get(key):
            why = (
                "patches applied inside the container are not part of a tested wheel"
                if key == "mods"
                else "spark-nightly builds its own wheels"
            )
            result.dropped.append(f"{key} {list(data[key])} ({why})")
    result.notes.extend(_what_dropped_parts_provided(data, serve))
    known = {
        "recipe_version",
        "name",
        "description",
        "model",
        "container",
        "command",
        "defaults",
        "env",
        "mods",
        "build_args",
        "cluster_only",
        "solo_only",
        "min_nodes",
        "max_nodes",
        "benchmark",
        "model_revision",
        "mode",
        "runtime",
    }
    for key in sorted(set(data) - known):
        result.dropped.append(f"{key} (no models.yaml equivalent)")
    return entry


def _what_dropped_parts_provided(data: Mapping[str, Any], serve: Mapping[str, Any]) -> list[str]:
    """Notes for what the dropped mods and build args gave the recipe's image: each one, and every serve value that
    names a file of a mod (the entry cannot boot until that file exists some other way)."""
    notes = []
    mods = [str(m) for m in data.get("mods") or []]
    for mod in mods:
        notes.append(f"mod {mod} patched the recipe's image; tonight's wheels lack it unless it is merged upstream")
    for argument in data.get("build_args") or []:
        notes.append(f"build arg {argument} shaped the recipe's image build; spark-nightly builds from its settings")
    values = [str(v) for k, v in serve.items() if k != "extra_args"] + [str(a) for a in serve.get("extra_args", ())]
    for value in values:
        for mod in mods:
            if "/" in value and (mod in value or Path(mod).name in value.split("/")):
                notes.append(f"serve value {value} names a file of the dropped mod {mod}: provide it another way")
    return notes


def _is_cluster(data: Mapping[str, Any], version: str, parallel: int, result: ImportedRecipe) -> bool:
    if data.get("cluster_only") or int(data.get("min_nodes", 1)) > 1 or data.get("mode") == "cluster":
        return True
    if data.get("solo_only") or data.get("max_nodes") == 1 or data.get("mode") == "solo":
        return False
    if parallel > 1:
        result.notes.append(
            f"runs solo or clustered; imported as a {parallel}-node cluster for its parallel size {parallel}"
        )
        return True
    return False


def _bench(data: Mapping[str, Any], result: ImportedRecipe) -> dict[str, Any]:
    args = (data.get("benchmark") or {}).get("args") or {}
    bench: dict[str, Any] = {}
    for key in ("pp", "tg", "depth", "concurrency"):
        if key in args:
            value = args[key]
            bench[key] = [int(v) for v in (value if isinstance(value, list) else [value])]
    if "pp" not in bench or "tg" not in bench:
        bench = {"pp": [2048], "tg": [32]} | bench
        result.notes.append("no benchmark args in the recipe; using pp2048 and tg32")
    return bench


def give_unique_ids(imported: Sequence[ImportedRecipe], taken: Collection[str] = ()) -> None:
    """Variants of one model (quantisations, modes) get ids of their own: suffixed by quantisation, then by the
    recipe's file name, then by a number; `taken` holds ids models.yaml already uses."""
    used = set(taken)
    counts: dict[str, int] = {}
    for recipe in imported:
        counts[recipe.entry["id"]] = counts.get(recipe.entry["id"], 0) + 1
    for recipe in imported:
        base = recipe.entry["id"]
        if counts[base] == 1 and base not in used:
            used.add(base)
            continue
        quantization = _slug(str(recipe.entry.get("serve", {}).get("quantization", "")))
        stem = _slug(Path(recipe.source).stem)
        candidates = [
            f"{base}-{quantization}" if quantization else "",
            stem if stem.startswith(base) else f"{base}-{stem}",
        ]
        chosen = next((c for c in candidates if c and c not in used), "")
        number = 2
        while not chosen:
            chosen = f"{base}-{number}" if f"{base}-{number}" not in used else ""
            number += 1
        used.add(chosen)
        recipe.entry["id"] = chosen
        recipe.notes.append(f"id {chosen}: another recipe (or models.yaml) already gives this model the id {base}")


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9._-]+", "-", text.lower()).strip("-")


def _check_entry(doc: Document, entry: dict[str, Any]) -> None:
    model_schema = dict(schema("models")["$defs"]["model"]) | {"$defs": schema("models")["$defs"]}
    errors = list(jsonschema.Draft202012Validator(model_schema).iter_errors(entry))
    if errors:
        raise ConfigError(
            [
                ConfigIssue(
                    doc.file, 1, 1, format_path(e.absolute_path), f"the converted entry is invalid: {e.message}"
                )
                for e in errors
            ]
        )
