"""Builders of the sources a night compiles: FlashInfer's wheels first, then vLLM."""

from __future__ import annotations

from pipeline.stages.build.builders.base import Builder
from pipeline.stages.build.builders.flashinfer import FlashInferBuilder
from pipeline.stages.build.builders.vllm import VllmBuilder

BUILDERS: dict[str, Builder] = {"flashinfer": FlashInferBuilder(), "vllm": VllmBuilder()}
BUILD_ORDER = ("flashinfer", "vllm")  # vLLM is resolved and locked against the FlashInfer wheels of the night
