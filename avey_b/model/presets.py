"""Named configurations (paper §5.1 and the authors' release), in the style of litgpt / torchtitan:
``presets.base(**overrides)``.

| name   | d    | L  | S   | k | V     | parameters | source                                           |
|--------|------|----|-----|---|-------|------------|--------------------------------------------------|
| tiny   | 32   | 2  | 4   | 2 | 99    | ~10K       | tests (N=13 is not a multiple of S)              |
| small  | 256  | 8  | 64  | 3 | 50368 | ≈16.6M     | CPU benchmarks (the quickstart: 4 layers, S=16)  |
| base   | 768  | 30 | 256 | 3 | 50368 | ≈164M      | paper ("165M")                                   |
| large  | 1024 | 46 | 256 | 3 | 50368 | ≈391M      | inferred: the shape that gives the paper's 391M  |
| avey-b1 | 768 | 30 | 256 | 3 | 50368 | ≈164M      | the authors' public release                      |
"""

from __future__ import annotations

from .configuration import AveyBConfig
from .release import AVEY_B1_ARCHITECTURE


def tiny(**overrides) -> AveyBConfig:
    """A few-thousand-parameter model for unit tests."""
    return AveyBConfig(**{"vocab_size": 99, "hidden_size": 32, "num_hidden_layers": 2, "split_size": 4,
                          "num_retrieved_splits": 2, "pad_token_id": 0, **overrides})


def small(**overrides) -> AveyBConfig:
    """The CPU benchmark configuration (d=256, L=8, S=64, k=3)."""
    return AveyBConfig(**{"hidden_size": 256, "num_hidden_layers": 8, "split_size": 64, "num_retrieved_splits": 3,
                          **overrides})


def base(**overrides) -> AveyBConfig:
    """Avey-B base: the paper's 165M model (§5.1)."""
    return AveyBConfig(**{"hidden_size": 768, "num_hidden_layers": 30, "split_size": 256, "num_retrieved_splits": 3,
                          **overrides})


def large(**overrides) -> AveyBConfig:
    """Avey-B large: 391M parameters (d=1024, L=46: the shape that gives the paper's 391M)."""
    return AveyBConfig(**{"hidden_size": 1024, "num_hidden_layers": 46, "split_size": 256,
                          "num_retrieved_splits": 3, **overrides})


def avey_b1(**overrides) -> AveyBConfig:
    """The parameterization of the authors' released checkpoints (``avey-ai/avey-b1-*``), base size."""
    return AveyBConfig(**{"hidden_size": 768, "num_hidden_layers": 30, "split_size": 256, "num_retrieved_splits": 3,
                          "norm_eps": 1e-12, "ranker_eps": 1e-12, **AVEY_B1_ARCHITECTURE, **overrides})


PRESETS = {"tiny": tiny, "small": small, "base": base, "large": large, "avey-b1": avey_b1}


def get(name: str, **overrides) -> AveyBConfig:
    """A preset by name, e.g. ``get("base", ranker="bidirectional")``."""
    if name not in PRESETS:
        raise ValueError(f"unknown Avey-B preset {name!r}; choose one of {sorted(PRESETS)}")
    return PRESETS[name](**overrides)
