"""Make a deliberately broken copy of a Hugging Face model folder, for testing the gate against real failures.

Runs inside the converter environment (torch, transformers, safetensors):
    python make_broken_model.py SRC DST random|nan|perturb [SCALE]
random: same architecture, freshly initialised weights (fluent-looking garbage at best);
nan: one layer's MLP output weights set to NaN (NaN logits); perturb: every weight multiplied by
(1 + SCALE * noise), a small numeric drift. Never shipped: made in the test, in its temporary folder.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
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
    if mode == "nan":
        name = next(k for k in weights if k.endswith("layers.15.mlp.down_proj.weight"))
        weights[name] = torch.full_like(weights[name], float("nan"))
    elif mode == "perturb":
        weights = {k: v * (1 + scale * torch.randn_like(v)) if v.is_floating_point() else v for k, v in weights.items()}
    else:
        raise SystemExit(f"unknown mode {mode}")
    save_file(weights, target / "model.safetensors", metadata={"format": "pt"})


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], float(sys.argv[4]) if len(sys.argv) > 4 else 0.0)
