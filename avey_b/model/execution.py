"""How a model runs, apart from what it computes: the execution settings of Avey-B, one frozen record per model.

An Avey-B is defined by its architecture (:class:`avey_b.model.configuration.AveyBConfig`: what ``config.json`` holds)
and its weights. How its forward pass is carried out — which of the ranker's equivalent algorithms computes MaxSim,
how large its blocks and tiles are, how much memory the choice may hold, how many tokens the processor runs at a
time — changes its speed and memory, never its outputs (beyond float rounding, and near-ties under
``ranker_selection_precision="bfloat16"``). These settings belong to the machine and the job, so they are kept
here, apart from the architecture:

* **Not saved.** ``config.json`` holds only what defines the model; a checkpoint saved on a GPU with large tiles
  runs on a laptop with the laptop's settings. Checkpoints saved before the split, whose ``config.json`` holds
  ``chunk_tokens``, ``ranker_algorithm``, ``ranker_block_size``, ``ranker_memory_mb`` or
  ``ranker_selection_precision``, still load: those keys become the loaded model's settings.
* **Old names.** ``chunk_tokens`` is the old name of ``processor_chunk_tokens`` (:data:`OLD_NAMES`), still read
  wherever a setting is given by name (a keyword, a saved ``config.json``, a model spec). Late chunks keep the name
  ``chunk_tokens`` elsewhere (:mod:`avey_b.model.chunks`), and SPLADE's logits are cut into ``logit_chunk_tokens``
  (:mod:`avey_b.model.sparse`).
* **Per model, never module state.** Each config carries its own :class:`ExecutionSettings` (``config.execution``),
  which the model reads at every forward pass, so two models in one process cannot change each other's behaviour
  (models built from one config object share it, as they share the architecture), and a benchmark or test sets a
  model's settings instead of patching this package.
* **Set by name, like transformers' run-time knobs.** transformers keeps its own (``attn_implementation``) on the
  config object but out of ``config.json``; these work the same way, one way for every field (:data:`FIELDS`): a
  keyword where a config is made or loaded (``AveyBConfig(processor_chunk_tokens=8192)``,
  ``presets.small(processor_chunk_tokens=8192)``, ``from_pretrained(path, ranker_algorithm="dense")``, the model spec
  ``avey-b-small:processor_chunk_tokens=8192``), or an
  attribute of a model's config (``model.config.ranker_memory_mb = 1024``). ``config.execution`` is the record
  the model reads, and the fast paths of the ranker take it as an argument.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from .config_keys import unknown_key

RANKER_ALGORITHMS = ("auto", "dense", "vocabulary")
#: ``processor_chunk_tokens`` by device type where it is left at ``None`` (any other device: 65536); see
#: ExecutionSettings.
DEFAULT_CHUNK_TOKENS = {"cpu": 4096}


def _default_tile_bytes() -> dict[tuple[str, int], int]:
    return {("cpu", 4): 2 * 2**20, ("cpu", 2): 2 * 2**20, ("cuda", 4): 64 * 2**20, ("cuda", 2): 64 * 2**20}


@dataclass(frozen=True)
class ExecutionSettings:
    """How an Avey-B runs its forward pass (the module docstring says why these are kept apart from the config).

    Args:
        ranker_algorithm (`str`, defaults to `"auto"`): how the ranker computes MaxSim for its choice; every path
            chooses the same splits (ties: the nearer split wins, at equal distance the preceding one).
            `"dense"`: every query token against every candidate token, ``O(N²·d)``. `"vocabulary"`: factored through
            the row's ``U`` distinct token ids — the ranker runs on the embedding output (§3.1), so
            ``M[v, j] = max_{u∈j} cos(E_v, x_u)`` and ``MaxSim(i, j) = Σ_{t∈i} M[id_t, j]``, ``O(U·N·d + N²/S)``;
            exact only when the model gets ``input_ids`` and equal ids have equal embeddings (no active embedding
            dropout), an error otherwise. `"auto"`: the vocabulary path where it is exact and its estimated work is
            lower (real text has far fewer distinct ids than tokens), the dense path elsewhere.
        ranker_block_size (`int`, defaults to 512): at most this many query tokens (dense path) or distinct ids
            (vocabulary path) are scored per block in the ranker.
        ranker_memory_mb (`float`, defaults to 256): cap on what the ranker's choice holds at once beside the
            embeddings: the similarity tiles (the query block shrinks, and the candidates are tiled, so that
            ``B × query tokens × candidate tokens × 8 bytes`` — a float32 similarity and room for one temporary of
            its size — stays under it whatever ``N``) and, on the vocabulary path, a tile of ``M`` columns with
            every query split's scores against it.
        ranker_selection_precision (`str`, defaults to `"exact"`): `"exact"` scores candidates at the input's
            precision; `"bfloat16"` runs the selection GEMM (the ``O(N²d)`` part) in bf16 for float32 inputs, which
            is faster wherever bf16 GEMMs outrun float32 ones (AVX512-BF16 or AMX CPUs, GPUs;
            ``benchmarks/vocabulary_ranker/``). Only near-ties can be chosen differently: the weights of the chosen
            splits are always recomputed at full precision.
        processor_chunk_tokens (`int`, defaults to `None`, which means 4096 on CPU and 65536 on other devices):
            read under its old name ``chunk_tokens`` too. After the ranker's choice, processor rows are built and run
            through the layers in chunks of about this many tokens, eager and compiled alike, so activation memory is
            linear in the input length (exported graphs, and ``output_hidden_states``, take all rows at once); a number
            applies on every device. The rule for the size: small enough that a chunk's activations stay in cache
            between a layer's passes on CPU, large enough that each kernel keeps a GPU busy; the timings behind the
            defaults are in ``benchmarks/roofline/`` (CPU) and ``benchmarks/efficiency_gpu/`` (GPU), the memory in
            ``benchmarks/compiled_memory/``.
        tile_bytes (`dict`, defaults to 2 MB on CPU and 64 MB on CUDA): bytes of similarities per tile, by
            ``(device type, element size)`` (64 MB for any other): small enough to stay in cache on CPU (the max is
            taken while the tile is hot, instead of writing and re-reading a block × N matrix), large enough that
            each GEMM keeps the cores busy; on GPU larger tiles amortize the launches (``benchmarks/roofline/``).
        order_by_last_split (`bool`, defaults to `True`): vocabulary path, unidirectional: order the distinct ids by
            the last split they occur in, so that a candidate split is multiplied only with the ids that still occur
            after it (``benchmarks/vocabulary_ranker/``).
        auto_overhead (`float`, defaults to 1.25) and auto_min_splits (`int`, defaults to 16): `"auto"` takes the
            vocabulary path when its estimated work times ``auto_overhead`` is below the dense path's, from
            ``auto_min_splits`` splits on (below that both paths take milliseconds). The overhead is the measured
            time ratio over the estimated work ratio (``benchmarks/vocabulary_ranker/``).
    """

    ranker_algorithm: str = "auto"
    ranker_block_size: int = 512
    ranker_memory_mb: float = 256
    ranker_selection_precision: str = "exact"
    processor_chunk_tokens: int | None = None
    tile_bytes: dict[tuple[str, int], int] = field(default_factory=_default_tile_bytes)
    order_by_last_split: bool = True
    auto_overhead: float = 1.25
    auto_min_splits: int = 16

    def __post_init__(self) -> None:
        for name in ("ranker_block_size", "processor_chunk_tokens", "auto_min_splits"):
            value = getattr(self, name)
            if name == "processor_chunk_tokens" and value is None:  # by device: processor_chunk_tokens_for
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                by_device = " (or None: by device)" if name == "processor_chunk_tokens" else ""
                raise ValueError(f"ExecutionSettings.{name} must be an integer >= 1{by_device}, got {value!r}")
        for name in ("ranker_memory_mb", "auto_overhead"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"ExecutionSettings.{name} must be a number > 0, got {value!r}")
        if self.ranker_algorithm not in RANKER_ALGORITHMS:
            raise ValueError(f"ExecutionSettings.ranker_algorithm={self.ranker_algorithm!r} is not one of "
                             f"{list(RANKER_ALGORITHMS)}")
        if self.ranker_selection_precision not in ("exact", "bfloat16"):
            raise ValueError(f"ExecutionSettings.ranker_selection_precision={self.ranker_selection_precision!r} is "
                             "not one of ['exact', 'bfloat16']")
        if not isinstance(self.order_by_last_split, bool):
            raise ValueError(f"ExecutionSettings.order_by_last_split must be True or False, got "
                             f"{self.order_by_last_split!r}")
        bad = {k: v for k, v in dict(self.tile_bytes).items()
               if not (isinstance(k, tuple) and len(k) == 2 and isinstance(v, int) and v >= 1)}
        if bad:
            raise ValueError(f"ExecutionSettings.tile_bytes maps (device type, element size) to a number of bytes "
                             f">= 1; got {bad}")
        object.__setattr__(self, "tile_bytes", dict(self.tile_bytes))  # a copy of its own: no shared dict

    def replace(self, **changes) -> ExecutionSettings:
        """A copy with ``changes``; an unknown name is an error naming the closest field."""
        names = [f.name for f in dataclasses.fields(self)]
        changes = renamed(changes)
        for key in changes:
            if key not in names:
                raise unknown_key(key, names, "ExecutionSettings' fields are")
        return dataclasses.replace(self, **changes)

    def processor_chunk_tokens_for(self, device: str) -> int:
        """Tokens per chunk of processor rows on ``device`` (a device type): ``processor_chunk_tokens``, or by
        device."""
        if self.processor_chunk_tokens is not None:
            return self.processor_chunk_tokens
        return DEFAULT_CHUNK_TOKENS.get(device, 65536)

    def tile_bytes_for(self, device: str, element_size: int) -> int:
        """Bytes of similarities per tile on ``device`` (a device type) for elements of ``element_size`` bytes."""
        return self.tile_bytes.get((device, element_size), 64 * 2**20)


#: Old names of settings, still read where settings are given by name (keywords, ``config.json``, model specs).
OLD_NAMES = {"chunk_tokens": "processor_chunk_tokens"}


def renamed(settings: dict) -> dict:
    """``settings`` (name -> value) with every old name (:data:`OLD_NAMES`) replaced by its new one; both names of
    one setting is an error naming them."""
    out = dict(settings)
    for old, new in OLD_NAMES.items():
        if old in out:
            if new in out:
                raise ValueError(f"{old!r} is the old name of {new!r}: give one of them, not both")
            out[new] = out.pop(old)
    return out


#: The settings, each of which an ``AveyBConfig`` takes as a keyword argument and an attribute of the same name (and
#: some of which ``config.json`` files saved before the split hold).
FIELDS = tuple(f.name for f in dataclasses.fields(ExecutionSettings))
