"""The backbone zoo: one conformance check over many architectures (``conformance``), sweeps over whole
families (``sweep``) and the Hugging Face entries (``hf``); ``python -m benchmarks.zoo`` prints their tables."""

from .conformance import TIMM_ZOO, TORCHVISION_ZOO, ZOO, ZooModel, ZooResult, build, check_pipeline, check_structure

__all__ = ["TIMM_ZOO", "TORCHVISION_ZOO", "ZOO", "ZooModel", "ZooResult", "build", "check_pipeline", "check_structure"]
