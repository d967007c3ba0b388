"""Score fixed token sequences with Hugging Face transformers, teacher-forced: the CPU profile's independent judge.

Runs as a script inside the converter environment (torch, transformers), not inside spark-nightly's own:
`python hf_score.py MODEL_DIR REQUEST.json OUTPUT.json`. The request lists items of prompt ids and
continuation ids; the output gives, for every continuation token, its logprob given the ids before it and the
best logprob at that position (how far the token was from the judge's own greedy choice).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def main(model_dir: Path, request: Path, output: Path) -> None:
    items = json.loads(request.read_text())["items"]
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.eval()
    scored = []
    with torch.no_grad():
        for item in items:
            prompt, continuation = item["prompt_token_ids"], item["token_ids"]
            logits = model(torch.tensor([prompt + continuation])).logits[0]
            # row i predicts token i + 1: the continuation's tokens are predicted by the rows before them
            rows = torch.log_softmax(logits[len(prompt) - 1 : len(prompt) + len(continuation) - 1].float(), dim=-1)
            chosen = rows.gather(1, torch.tensor(continuation)[:, None])[:, 0]
            best = rows.max(dim=1).values
            scored.append(
                {
                    "id": item["id"],
                    "logprobs": [_finite(float(v)) for v in chosen],
                    "best": [_finite(float(v)) for v in best],
                }
            )
    output.write_text(json.dumps({"items": scored}))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
