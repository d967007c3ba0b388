"""Recipe import: real-shaped spark-vllm-docker v1 and sparkrun v2 recipes become valid matrix entries."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from pipeline.config.bundle import ConfigPaths, load_config
from pipeline.config.matrix import build_matrix
from pipeline.config.recipes import give_unique_ids, import_recipe
from pipeline.errors import ConfigError
from tests.corpus import BASE

RECIPES = Path(__file__).parents[1] / "data" / "recipes"


def test_a_solo_recipe_keeps_its_serve_options_and_env_and_runs_tonights_build_not_its_image() -> None:
    imported = import_recipe(RECIPES / "qwen3.5-35b-fp8-solo.yaml")
    entry = imported.entry
    assert entry["id"] == "qwen3.5-35b-a3b-fp8"
    assert entry["launch"] == {"target": "docker"}  # the recipe's image would serve its own vLLM, not tonight's
    assert any(note.startswith("the recipe's container vllm-node is not used") for note in imported.notes)
    assert entry["topology"] == {"mode": "solo"}
    assert entry["serve"] == {
        "gpu_memory_utilization": 0.85,
        "max_model_len": 65536,
        "kv_cache_dtype": "fp8",
        "enable_auto_tool_choice": True,
        "tool_call_parser": "qwen3_coder",
        "reasoning_parser": "qwen3",
    }
    assert entry["env"] == {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}
    assert imported.dropped == ["--host 0.0.0.0 (the harness chooses it)", "--port 8000 (the harness chooses it)"]


def test_a_cluster_only_recipe_becomes_a_two_node_ray_entry_and_reports_its_mods() -> None:
    imported = import_recipe(RECIPES / "qwen3-235b-gptq-cluster.yaml")
    entry = imported.entry
    assert entry["launch"]["target"] == "ray"
    assert entry["topology"] == {"mode": "cluster", "nodes": 2}
    assert entry["serve"]["tensor_parallel_size"] == 2
    assert entry["serve"]["distributed_executor_backend"] == "ray"
    assert any(line.startswith("mods ['mods/fix-qwen3-moe-marlin']") for line in imported.dropped)
    assert any(note.startswith("mod mods/fix-qwen3-moe-marlin patched the recipe's image") for note in imported.notes)


def test_doubled_braces_in_a_v1_command_become_json_options() -> None:
    imported = import_recipe(RECIPES / "gpt-oss-120b-speculative.yaml")
    serve = imported.entry["serve"]
    assert serve["speculative_config"] == {
        "method": "eagle3",
        "model": "nvidia/gpt-oss-120b-Eagle3",
        "num_speculative_tokens": 3,
    }
    assert serve["compilation_config"] == {"cudagraph_mode": "piecewise"}
    assert serve["extra_args"] == ["--async-scheduling"]
    assert any(line.startswith("build_args ['--exp-mxfp4']") for line in imported.dropped)
    assert "env" not in imported.entry  # `env:` with nothing after it is null in real recipes


def test_a_v2_recipe_resolves_nested_placeholders_in_plain_json_and_its_benchmark() -> None:
    entry = import_recipe(RECIPES / "qwen3-8b-sparkrun-v2.yaml").entry
    assert entry["serve"]["speculative_config"] == {"method": "ngram", "num_speculative_tokens": 4}
    assert entry["serve"]["served_model_name"] == "qwen3-8b"
    assert entry["bench"] == {"pp": [512, 2048], "tg": [32, 128], "depth": [0, 4096]}
    assert entry["topology"] == {"mode": "solo"}


def test_a_placeholder_without_a_default_is_located() -> None:
    with pytest.raises(ConfigError) as caught:
        import_recipe(RECIPES / "broken-missing-placeholder.yaml")
    assert str(caught.value.issues[0]).endswith(
        "broken-missing-placeholder.yaml:5:10: command: "
        "placeholder {max_model_len} has no value in 'defaults'; add it there"
    )


def test_a_runtime_other_than_vllm_is_refused(tmp_path: Path) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text('recipe_version: "2"\nmodel: org/m\nruntime: sglang\n')
    with pytest.raises(ConfigError) as caught:
        import_recipe(recipe)
    assert "runtime 'sglang' is not vLLM" in str(caught.value.issues[0])


def test_imported_entries_pass_validate_once_they_have_references(tmp_path: Path) -> None:
    config = tmp_path / "config"
    shutil.copytree(BASE, config)
    models = yaml.safe_load((config / "models.yaml").read_text())
    good = [
        "qwen3.5-35b-fp8-solo.yaml",
        "qwen3-235b-gptq-cluster.yaml",
        "gpt-oss-120b-speculative.yaml",
        "qwen3-8b-sparkrun-v2.yaml",
    ]
    for name in good:
        imported = import_recipe(RECIPES / name)
        entry = imported.entry
        assert any(n.startswith("pin revision: to the commit you test") for n in imported.notes)
        entry["golden"] = "basic"
        entry["revision"] = "0" * 40
        models["models"].append(entry)
        cells = {c: {"ref": 10, "unit": "t/s", "warn": "-5%", "fail": "-10%"} for c in _cell_names(entry)}
        (config / "thresholds" / "spark-gb10" / f"{entry['id']}.yaml").write_text(
            yaml.safe_dump({"version": 1, "cells": cells})
        )
    (config / "models.yaml").write_text(yaml.safe_dump(models, sort_keys=False))
    loaded = load_config(ConfigPaths(config / "models.yaml", config / "thresholds", config / "golden"))
    assert len(loaded.matrix.entries) == 2 + len(good)


def _cell_names(entry: dict[str, object]) -> list[str]:
    profiles = yaml.safe_load((BASE / "models.yaml").read_text())["profiles"]
    return [c.name for c in build_matrix({"profiles": profiles, "models": [entry]}).entries[0].bench.cells()]


def _recipe(tmp_path: Path, text: str, name: str = "r.yaml") -> Path:
    recipe = tmp_path / name
    recipe.write_text(text)
    return recipe


def test_a_v1_template_is_filled_by_name_never_evaluated(tmp_path: Path) -> None:
    """str.format took 1 GiB and 55 s for `{port:>200000000}` and walked attributes; names only, now."""
    head = 'recipe_version: "1"\nname: m\ncontainer: c\ndefaults: {port: 8000, n: 2}\ncommand: '
    for template, why in [
        ("vllm serve org/m --port {port:>200000000}", "placeholder {port:>200000000} is not a plain name"),
        ("vllm serve org/m --x {port.__class__}", "placeholder {port.__class__} is not a plain name"),
        ("vllm serve org/m --x {n[0]}", "placeholder {n[0]} is not a plain name"),
        ("vllm serve org/m --x {", "a single '{' is not a placeholder"),
    ]:
        with pytest.raises(ConfigError) as caught:
            import_recipe(_recipe(tmp_path, head + f"'{template}'\n"))
        assert why in str(caught.value.issues[0]), template
    entry = import_recipe(_recipe(tmp_path, head + "'vllm serve org/m --max-num-seqs {n} --x {{}}'\n")).entry
    assert entry["serve"] == {"max_num_seqs": 2, "extra_args": ["--x", "{}"]}


def test_variants_of_one_model_get_ids_of_their_own(tmp_path: Path) -> None:
    fp8 = 'recipe_version: "2"\nmodel: org/big\ncommand: vllm serve org/big --quantization fp8\n'
    awq = 'recipe_version: "2"\nmodel: org/big\ncommand: vllm serve org/big --quantization awq\n'
    plain = 'recipe_version: "2"\nmodel: org/big\ncommand: vllm serve org/big\n'
    imported = [import_recipe(_recipe(tmp_path, text, f"{n}.yaml")) for n, text in enumerate((fp8, awq, plain))]
    give_unique_ids(imported, taken={"big"})
    assert [r.entry["id"] for r in imported] == ["big-fp8", "big-awq", "big-2"]
    assert all(any("already gives this model the id big" in n for n in r.notes) for r in imported)


@pytest.mark.parametrize(
    "command",
    [
        "vllm serve org/m --task embed",
        "vllm serve org/m --runner pooling",
        "vllm serve org/m --convert=classify",
        "vllm serve BAAI/bge-reranker-v2-m3",
        "vllm serve Qwen/Qwen3-Embedding-8B",
    ],
)
def test_embedding_and_reranker_recipes_are_refused_not_imported_as_chat(tmp_path: Path, command: str) -> None:
    model = command.split()[2]
    with pytest.raises(ConfigError) as caught:
        import_recipe(_recipe(tmp_path, f'recipe_version: "2"\nmodel: {model}\ncommand: {command}\n'))
    assert "an embedding or scoring model has no chat answers" in str(caught.value.issues[0])


def test_an_auto_context_length_is_accepted_and_validates(tmp_path: Path) -> None:
    recipe = 'recipe_version: "2"\nmodel: org/m\ncommand: vllm serve org/m --max-model-len auto\n'
    entry = import_recipe(_recipe(tmp_path, recipe)).entry
    assert entry["serve"] == {"max_model_len": "auto"}


def test_notes_name_what_dropped_mods_and_build_args_provided(tmp_path: Path) -> None:
    recipe = (
        'recipe_version: "1"\nname: m\ncontainer: c\nmods: [mods/chat-template-fix]\nbuild_args: [--pre-tf]\n'
        "command: vllm serve org/m --chat-template /workspace/mods/chat-template-fix/template.jinja\n"
    )
    notes = import_recipe(_recipe(tmp_path, recipe)).notes
    assert "build arg --pre-tf shaped the recipe's image build; spark-nightly builds from its settings" in notes
    assert any(
        n.startswith("serve value /workspace/mods/chat-template-fix/template.jinja names a file of the dropped mod")
        for n in notes
    )


def test_defaults_that_are_not_a_mapping_and_an_upper_case_quantisation_are_handled(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        import_recipe(_recipe(tmp_path, 'recipe_version: "1"\nname: m\ncontainer: c\ndefaults: [1]\ncommand: x\n'))
    assert "defaults is a mapping of placeholder names to values" in str(caught.value.issues[0])
    fp8 = 'recipe_version: "2"\nmodel: org/big\ncommand: vllm serve org/big --quantization FP8\n'
    imported = [import_recipe(_recipe(tmp_path, fp8, f"{n}.yaml")) for n in range(2)]
    give_unique_ids(imported)
    assert [r.entry["id"] for r in imported] == ["big-fp8", "big-1"]


def test_an_api_key_in_a_recipe_is_dropped_like_the_other_flags_the_harness_sets(tmp_path: Path) -> None:
    recipe = 'recipe_version: "2"\nmodel: org/m\ncommand: vllm serve org/m --api-key s3cret --served-model-name m\n'
    imported = import_recipe(_recipe(tmp_path, recipe))
    assert imported.entry["serve"] == {"served_model_name": "m"}
    assert "--api-key (the harness makes a key for each boot; the value is not shown)" in imported.dropped
    said = [*imported.dropped, *imported.notes]
    assert said and not any("s3cret" in line for line in said)
