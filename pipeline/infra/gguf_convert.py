"""Convert a GGUF checkpoint into a Hugging Face folder (fp32 safetensors, tokenizer, chat template).

Runs as a script inside the converter environment (torch, transformers, gguf, accelerate), not inside
spark-nightly's own: `python gguf_convert.py FILE.gguf OUT_DIR`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def convert(gguf_file: Path, out_dir: Path) -> None:
    folder, name = str(gguf_file.parent), gguf_file.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    # transformers dequantizes GGUF to plain fp32 but keeps the quantizer marker, and then refuses to save
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(str(out_dir))
    tokenizer.save_pretrained(str(out_dir))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: gguf_convert.py FILE.gguf OUT_DIR")
    convert(Path(sys.argv[1]), Path(sys.argv[2]))
    print(f"converted {sys.argv[1]} -> {sys.argv[2]}")
