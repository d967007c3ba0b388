"""spark-nightly: the nightly regression gate for vLLM and FlashInfer wheels on the DGX Spark."""

__version__ = "0.1.0"
