"""Make a deliberately broken copy of a Hugging Face model folder, for testing the gate against real failures.

Runs inside the converter environment (torch, transformers, safetensors):
    python benchmarks/make_broken_model.py SRC DST MODE [SCALE]
Each mode stands for an engine that computes the wrong thing from the right model:
random: same architecture, freshly initialised weights; nan: one layer's MLP output weights set to NaN;
perturb: every weight multiplied by (1 + SCALE * noise), a small numeric drift; zero-attention: every layer's
attention output projection zeroed; scale-norm: the final RMSNorm weight times SCALE (every logit times SCALE, as
an output head scaled by SCALE would give, config.json untouched); nan-token: the input embedding of token SCALE
set to NaN (the output head keeps the good row); no-eos: the output head's row of the end-of-turn token negated,
so the model ends its turn where it should not and runs on where it should end; reverse-layers: the decoder
layers in reverse order; swap-layers: layers 10 and 20 swapped; rope-theta: RoPE's theta divided by SCALE in
config.json; bf16: every weight rounded to bfloat16 and back
(benign). Never shipped: made by the tests (and benchmarks/gpu_golden_variants.py) in a folder of their own.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file  # type: ignore[import-not-found,unused-ignore]  # the converter's runtime has it
from transformers import AutoConfig, AutoModelForCausalLM

KEEP = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "special_tokens_map.json",
)


def main(source: Path, target: Path, mode: str, scale: float) -> None:
    target.mkdir(parents=True, exist_ok=True)
    for name in KEEP:
        if (source / name).exists():
            shutil.copyfile(source / name, target / name)
    torch.manual_seed(1234)
    if mode == "random":
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(source), dtype=torch.float32)
        model.save_pretrained(target)
        return
    weights = load_file(source / "model.safetensors")
    config = json.loads((source / "config.json").read_text())
    if mode in LAYER_MODES:
        weights = _reorder_layers(weights, config["num_hidden_layers"], mode)
    elif mode in HEAD_MODES:
        weights, config = _break_head(weights, config, mode, scale)
    elif mode == "rope-theta":
        config["rope_parameters"]["rope_theta"] /= scale
    else:
        weights = _break_weights(weights, mode, scale)
    if mode in (*HEAD_MODES, "rope-theta"):  # the others keep the good config.json byte for byte
        (target / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    save_file(weights, target / "model.safetensors", metadata={"format": "pt"})


LAYER_MODES = ("reverse-layers", "swap-layers")
HEAD_MODES = ("nan-token", "no-eos")


def _break_weights(weights: dict[str, torch.Tensor], mode: str, scale: float) -> dict[str, torch.Tensor]:
    if mode == "nan":
        name = next(k for k in weights if k.endswith("layers.15.mlp.down_proj.weight"))
        weights[name] = torch.full_like(weights[name], float("nan"))
    elif mode == "perturb":
        weights = {k: v * (1 + scale * torch.randn_like(v)) if v.is_floating_point() else v for k, v in weights.items()}
    elif mode == "zero-attention":
        weights = {k: torch.zeros_like(v) if k.endswith("self_attn.o_proj.weight") else v for k, v in weights.items()}
    elif mode == "scale-norm":
        weights["model.norm.weight"] = weights["model.norm.weight"] * scale
    elif mode == "bf16":
        weights = {k: v.to(torch.bfloat16).to(v.dtype) if v.is_floating_point() else v for k, v in weights.items()}
    else:
        raise SystemExit(f"unknown mode {mode}")
    return weights


def _break_head(
    weights: dict[str, torch.Tensor], config: dict[str, Any], mode: str, scale: float
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Modes that need the output head apart from the input embeddings: untie them first (same numbers)."""
    embeddings = weights["model.embed_tokens.weight"]
    head = embeddings.clone()
    config["tie_word_embeddings"] = False
    if mode == "nan-token":
        embeddings = embeddings.clone()
        embeddings[int(scale)] = float("nan")
    else:  # no-eos
        head[config["eos_token_id"]] = -head[config["eos_token_id"]]
    return weights | {"model.embed_tokens.weight": embeddings, "lm_head.weight": head}, config


def _reorder_layers(weights: dict[str, torch.Tensor], layers: int, mode: str) -> dict[str, torch.Tensor]:
    order = list(range(layers))[::-1] if mode == "reverse-layers" else _swapped(layers, 10, 20)
    renamed = {}
    for name, value in weights.items():
        match = re.match(r"model\.layers\.(\d+)\.(.*)", name)
        renamed[f"model.layers.{order[int(match.group(1))]}.{match.group(2)}" if match else name] = value
    return renamed


def _swapped(layers: int, a: int, b: int) -> list[int]:
    order = list(range(layers))
    order[a], order[b] = b, a
    return order


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], float(sys.argv[4]) if len(sys.argv) > 4 else 0.0)
