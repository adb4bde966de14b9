"""AveyBConfig: every architecture knob of Avey-B (the paper's §3–4, its ablations, and the authors' release),
documented and validated.

Paper symbols: ``d`` = ``hidden_size``, ``L`` = ``num_hidden_layers``, ``S`` = ``split_size``,
``k`` = ``num_retrieved_splits``, ``V`` = ``vocab_size``, ``m`` = ``expansion_factor * d``.
Training settings (optimizer, data, schedule) deliberately live elsewhere (``avey_b.training``), and so do the
execution settings, which change how the forward pass runs but not what it computes (``avey_b.model.execution``: a
config takes them by name and keeps them as ``config.execution``, out of ``config.json``). One loss setting stays here,
``contrastive_scale``: it defines what the sentence-embedding head's loss is, as transformers configs keep a head's
``problem_type``, so a saved head trains with the same loss after loading.
"""

from __future__ import annotations

import dataclasses
import inspect

from transformers import GenerationConfig, PretrainedConfig

from . import release
from .config_keys import unknown_key
from .execution import FIELDS as EXECUTION_KEYS
from .execution import OLD_NAMES, ExecutionSettings, renamed

#: Named layer arrangements of the paper's "How to arrange static and dynamic layers?" appendix.
#: Each maps the number of layers L to a string of ``S`` (static) / ``D`` (dynamic) letters.
LAYER_PATTERNS = {
    "interleaved_sd": lambda n: "".join("S" if i % 2 == 0 else "D" for i in range(n)),
    "interleaved_ds": lambda n: "".join("D" if i % 2 == 0 else "S" for i in range(n)),
    "dynamic_head": lambda n: "D" + "S" * (n - 1),
    "dynamic_tail": lambda n: "S" * (n - 1) + "D",
    "two_stage_sd": lambda n: "S" * (n // 2) + "D" * (n - n // 2),
    "two_stage_ds": lambda n: "D" * (n // 2) + "S" * (n - n // 2),
    "all_static": lambda n: "S" * n,
    "all_dynamic": lambda n: "D" * n,
}
_LETTER_TO_TYPE = {"S": "static", "D": "dynamic"}

ACTIVATIONS = ("relu2", "relu", "gelu", "gelu_tanh", "silu", "identity")
DYNAMIC_NORMALIZATIONS = ("sum", "l1", "rms", "softmax", "scaled_softmax", "none")
RANKER_MODES = ("unidirectional", "bidirectional", "off")
RANKER_PLACEMENTS = ("embeddings", "every_layer")
RETRIEVAL_POOLINGS = ("mean", "eos")
PADDINGS = ("masked", "release")


def _generation_keys() -> frozenset[str]:
    """The generation settings that ``PretrainedConfig`` drops from its keyword arguments (they belong in a
    ``GenerationConfig``; config.json files written by earlier transformers versions hold some, e.g. ``use_cache``):
    the fields of a default ``GenerationConfig`` that a ``PretrainedConfig`` given all of them does not keep. Asked
    of the two public classes once, at import."""
    fields = GenerationConfig().to_dict()
    kept = PretrainedConfig(**fields).to_dict()
    return frozenset(k for k in fields if k not in kept)


#: Keys that transformers itself passes to (or saves from) a config besides a model's own fields: the base config's
#: fields, loading and label keys, special-token ids, the generation settings it drops, and the release's config keys
#: (read through ``attribute_map``). Any other key ``AveyBConfig`` does not have is a typo.
TRANSFORMERS_KEYS = frozenset(
    {f.name for f in dataclasses.fields(PretrainedConfig)}
    | {"model_type", "torch_dtype", "num_labels", "name_or_path", "output_attentions", "attn_implementation",
       "experts_implementation", "per_layer_config", "auto_map", "bos_token_id", "eos_token_id", "sep_token_id",
       "cls_token_id", "mask_token_id", "unk_token_id", "tokenizer_class", "finetuning_task", "task_specific_params",
       "prefix", "is_decoder", "add_cross_attention", "tie_encoder_decoder", "pruned_heads", "torchscript"}
    | _generation_keys()
    | set(release.RELEASE_CONFIG_FIELDS) | release.RELEASE_REDUNDANT_FIELDS | release.HF_STANDARD_FIELDS
)


class _ExecutionKey:
    """An ``AveyBConfig`` attribute for the field of the same name of its execution settings: read from
    ``config.execution``, set by replacing that record (validated, an unknown value named); never saved in
    ``config.json``."""

    def __init__(self, field: str | None = None):
        self.field = field  # the field, where the attribute is its old name

    def __set_name__(self, owner, name: str) -> None:
        self.name = self.field or name

    def __get__(self, config, owner=None):
        return self if config is None else getattr(config.execution, self.name)

    def __set__(self, config, value) -> None:
        config._execution = config.execution.replace(**{self.name: value})


def _choice(field: str, value, allowed) -> None:
    if value not in allowed:
        raise ValueError(f"AveyBConfig.{field}={value!r} is not one of {list(allowed)}")


class AveyBConfig(PretrainedConfig):
    r"""Configuration of an Avey-B encoder. Defaults are the paper's *base* model (paper §5.1: "165M"; ≈164M
    parameters here).

    Args:
        vocab_size (`int`, defaults to 50368): ``V``, rows of the embedding table (tied with the MLM decoder).
        hidden_size (`int`, defaults to 768): ``d``, the model width.
        num_hidden_layers (`int`, defaults to 30): ``L``, layers of the neural processor (paper §3.2).
        split_size (`int`, defaults to 256): ``S``, tokens per split; the processor's context width (paper §3.1).
        num_retrieved_splits (`int`, defaults to 3): ``k``, splits the ranker retrieves per split (paper §3.1).
        expansion_factor (`int`, defaults to 4): enricher width ``m = expansion_factor * d`` (paper §3.2).
        bypass_proportion (`float`, defaults to 0.5): share of the ``m`` enriched features bypassed straight to
            the fuser (``m_h``); the rest (``m_t``) is split evenly into gate ``Z_tl`` and contextual part ``Z_tr``.
        enricher_activation (`str`, defaults to `"relu2"`): ``σ_e`` of the enricher; ReLU² in the paper (App. A,
            assumption A1, which makes cosine similarities non-negative); the release uses `"gelu"`.
        mixing_activation (`str`, defaults to `"relu"`): ``σ`` applied after the static/dynamic mixing (App. A, A3);
            `"identity"` in the release.
        enricher_layout (`str`, defaults to `"paper"`): order of the enricher's output features.
            `"paper"`: ``[bypass m_h | gate | contextual]`` and fuser input ``[bypass | c]``; `"release"`:
            ``[contextual | gate | bypass m_h]`` and fuser input ``[c | bypass]``.
        layer_pattern (`str`, defaults to `"interleaved_sd"`): one of ``LAYER_PATTERNS`` (appendix "How to Arrange
            Static and Dynamic Layers?") or an explicit string of ``S``/``D`` letters of length ``L`` (e.g.
            ``"SDSD"``). Expanded into ``mixer_types``.
        mixer_types (`list[str]`, *optional*): per-layer ``"static"``/``"dynamic"``/``"coupled"``; derived from
            ``layer_pattern`` and ``parameterization`` when not given (ModernBERT's ``layer_types``, renamed:
            transformers validates that name
            against its attention kinds).
        parameterization (`str`, defaults to `"decoupled"`): `"decoupled"` (Avey-B, §4.2: a layer is static *or*
            dynamic) or `"coupled"` (original Avey: every layer mixes with ``V ⊙ S̃``; the configured row
            normalization is kept: our choice, the paper does not say). Coupled ignores ``layer_pattern``.
        dynamic_normalization (`str`, defaults to `"sum"`): row normalization of the dynamic cosine matrix ``S``:
            `"sum"` ``S/(Σ_j S + ε)`` (paper); `"l1"` ``S/max(Σ_j |S|, ε)`` (release); `"rms"` ``S/(rms_j S + ε)``;
            `"softmax"`; `"scaled_softmax"` softmax of ``S / dynamic_temperature``; `"none"`.
        dynamic_temperature (`float`, defaults to 0.1): temperature of `"scaled_softmax"`. Cosines lie in
            [-1, 1], where a plain softmax is nearly uniform; dividing by 0.1 gives logits in [-10, 10], a
            sharpness comparable to scaled dot-product attention (our choice; the paper gives no value).
        static_weights (`str`, defaults to `"signed"`): `"signed"` or `"unsigned"` (``V ≥ 0`` enforced by using
            ``|V|`` in the forward pass; App. "non-negativity").
        ranker (`str`, defaults to `"unidirectional"`): `"unidirectional"` (candidates precede the split),
            `"bidirectional"` (all other splits) or `"off"` (no retrieval: every split is processed alone; set
            ``split_size`` to the sequence length to let the processor see the whole sequence, as the paper's
            "w/o ranker" ablation does).
        ranker_placement (`str`, defaults to `"embeddings"`): where the ranker runs. `"embeddings"`: once, on the
            embedding output, before the first layer (§3.1; Avey-B as published). `"every_layer"`: the ablation of
            the paper's appendix "Ablation Study": before each layer the top-``k`` splits are chosen again on that
            layer's input and the rows rebuilt from it, each layer with its own compressor ``P_ℓ`` (our reading; the
            paper does not say); the layers then take all rows at once (``processor_chunk_tokens`` does not apply) and
            `"vocabulary"` is refused (MaxSim factors through token ids only on the embeddings). Needs a ranker.
            Details: ``AveyBModel._rank_every_layer``; cost: ``benchmarks/ranker_every_layer/``.
        ranker_weighting (`str`, defaults to `"max"`): the selected MaxSim scores are divided by the largest
            (`"max"`, paper) or the smallest (`"min"`, release, weights ≥ 1) selected score.
        compressor (`bool`, defaults to `True`): the neural compressor ``X̂ = P·X_cat (+ X_i)`` (§4.3). When off,
            each split is processed together with its ``k`` retrieved splits (``(k+1)S`` tokens) and only the
            current split's outputs are kept.
        compressor_residual (`bool`, defaults to `True`): the residual ``+ X_i`` of the compressor.
        mixing_bias (`bool`, defaults to `False`): the optional per-position biases ``b_s``/``b_d ∈ R^{C×d'}``.
        enricher_bias (`bool`, defaults to `True`): bias ``b`` of the enricher.
        fuser_bias (`bool`, defaults to `False`): a bias on the fuser (the release has one).
        residual_scale (`bool`, defaults to `False`): a learned scalar ``alpha`` on each layer's residual
            (``out = fuser(...) + alpha * x``), as in the release.
        final_norm (`bool`, defaults to `True`): RMSNorm on the encoder output (the release has none).
        decoder_bias (`bool`, defaults to `False`): bias of the tied masked-LM decoder.
        norm_eps (`float`, defaults to 1e-6): epsilon of the RMSNorms.
        dynamic_eps (`float`, defaults to 1e-6): ``ε`` of the dynamic row normalization.
        ranker_eps (`float`, defaults to 1e-6): added to the ranker's weight denominator.
        embedding_dropout (`float`, defaults to 0.0): dropout on the embeddings.
        hidden_dropout (`float`, defaults to 0.0): dropout on each fuser output.
        classifier_dropout (`float`, defaults to 0.0): dropout before classification heads.
        initializer (`str`, defaults to `"xavier_normal"`): `"xavier_normal"` (the release's scheme) or `"normal"`
            (``N(0, initializer_range)``) for linear, embedding, static ``V`` and compressor ``P`` weights.
        initializer_range (`float`, defaults to 0.02): std of the `"normal"` initializer.
        classifier_head (`str`, defaults to `"linear"`): `"linear"` (dropout + one linear layer on the pooled /
            per-token states) or `"avey-b1"` (the release's heads).
        sparse_prediction (`bool`, defaults to `False`): the MLM head computes logits only at positions whose
            label is not -100 (saves most of the vocabulary projection in pretraining).
        normalize_embeddings (`bool`, defaults to `True`): L2-normalize sentence embeddings.
        matryoshka_dimensions (`list[int]`, *optional*): the shorter embedding sizes this model was trained to give
            (Matryoshka representation learning, Kusupati et al., 2022): the first ``n`` values of its pooled vector,
            re-normalized, for each ``n`` listed. Servers answer ``dimensions=n`` for these sizes only.
        contrastive_scale (`float`, defaults to 20.0): logit scale of the sentence-embedding head's in-batch
            contrastive loss on cosine similarities (sentence-transformers' default for the same loss).
        embedding_kind (`str`, defaults to `"dense"`): what a saved directory is for in sentence-transformers
            (:func:`avey_b.model.loading.sentence_transformers_files`): `"dense"` (a `SentenceTransformer`) or
            `"sparse"` (a masked-LM's directory as a SPLADE `SparseEncoder`; what `avey-b finetune --task
            sparse-embedding` saves).
        multivector_dim (`int`, defaults to 128): the size of the multi-vector head's token vectors (late
            interaction, ColBERT's 128 by default): a linear projection of each token's last hidden state, normalized
            to a unit vector (:class:`avey_b.model.multivector.AveyBForMultiVector`), scored by MaxSim (§3.1).
        context_len (`int`, *optional*): the input length the authors' release states (its ``AveyConfig``'s
            ``context_len``, 512 by default there, which its ``config.json`` holds as ``max_position_embeddings``
            "for compatibility with the eval lib"). Informational: the model has no position table and takes inputs
            of any length, and nothing truncates at this value except the paper's evaluation protocol, where
            EncodEval's rule cuts every model's inputs at ``round(0.99 x`` this ``)``. Kept under its own name
            because generic code (sentence-transformers, for one) reads ``max_position_embeddings`` as a hard
            limit and would cut Avey-B everywhere. None (our own checkpoints): no stated length.
        padding (`str`, defaults to `"masked"`): what padding is to the model. `"masked"`: split padding and
            ``attention_mask == 0`` are left out of the ranker, the compressor, every mixing layer and every pooling,
            so real tokens never see padding. `"release"`: as the authors' release computes (to reproduce what they
            fine-tuned and scored): ``attention_mask`` is ignored by the backbone, the last split is padded with
            zero rows that the ranker, the compressor and the static and dynamic mixing take as tokens, batch
            padding (the pad token's embedding) is processed as tokens too, so an output depends on the batch's
            longest input, and the sequence-classification head averages over every position, batch padding
            included.
        retrieval_pooling (`str`, *optional*): the release's switch for retrieval embeddings: `"eos"` pools the
            last token (the end token EncodEval appends) instead of the masked mean, and the paper protocol's
            retrieval honours it as EncodEval does; `"mean"` or None: the masked mean.

    The execution settings (``ranker_algorithm``, ``ranker_block_size``, ``ranker_memory_mb``,
    ``ranker_selection_precision``, ``processor_chunk_tokens`` (old name ``chunk_tokens``, still read), ``tile_bytes``,
    ``order_by_last_split``, ``auto_overhead``, ``auto_min_splits``) are keyword arguments and attributes of the
    config too, as transformers' ``attn_implementation`` is: how the forward pass runs (the ranker's algorithm,
    blocks, tiles and memory cap, the processor's chunk size), which changes speed and memory, not the outputs. They
    are documented in :class:`avey_b.model.execution.ExecutionSettings`, held as ``config.execution`` and never
    saved in ``config.json``.
    """

    model_type = "avey-b"
    # Keys of the authors' release config.json read as our fields (one table, in ``avey_b.model.release``).
    attribute_map = release.attribute_map()

    def __init__(
        self,
        vocab_size: int = 50368,
        hidden_size: int = 768,
        num_hidden_layers: int = 30,
        split_size: int = 256,
        num_retrieved_splits: int = 3,
        expansion_factor: int = 4,
        bypass_proportion: float = 0.5,
        enricher_activation: str = "relu2",
        mixing_activation: str = "relu",
        enricher_layout: str = "paper",
        layer_pattern: str = "interleaved_sd",
        mixer_types: list[str] | None = None,
        parameterization: str = "decoupled",
        dynamic_normalization: str = "sum",
        dynamic_temperature: float = 0.1,
        static_weights: str = "signed",
        ranker: str = "unidirectional",
        ranker_placement: str = "embeddings",
        ranker_weighting: str = "max",
        compressor: bool = True,
        compressor_residual: bool = True,
        mixing_bias: bool = False,
        enricher_bias: bool = True,
        fuser_bias: bool = False,
        residual_scale: bool = False,
        final_norm: bool = True,
        decoder_bias: bool = False,
        norm_eps: float = 1e-6,
        dynamic_eps: float = 1e-6,
        ranker_eps: float = 1e-6,
        embedding_dropout: float = 0.0,
        hidden_dropout: float = 0.0,
        classifier_dropout: float = 0.0,
        initializer: str = "xavier_normal",
        initializer_range: float = 0.02,
        classifier_head: str = "linear",
        sparse_prediction: bool = False,
        normalize_embeddings: bool = True,
        matryoshka_dimensions: list[int] | None = None,
        contrastive_scale: float = 20.0,
        embedding_kind: str = "dense",
        multivector_dim: int = 128,
        context_len: int | None = None,
        retrieval_pooling: str | None = None,
        padding: str = "masked",
        pad_token_id: int | None = None,
        tie_word_embeddings: bool = True,
        **kwargs,
    ):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.split_size = split_size
        self.num_retrieved_splits = num_retrieved_splits
        self.expansion_factor = expansion_factor
        self.bypass_proportion = bypass_proportion
        self.enricher_activation = enricher_activation
        self.mixing_activation = mixing_activation
        self.enricher_layout = enricher_layout
        self.layer_pattern = layer_pattern
        self.parameterization = parameterization
        self.dynamic_normalization = dynamic_normalization
        self.dynamic_temperature = dynamic_temperature
        self.static_weights = static_weights
        self.ranker = ranker
        self.ranker_placement = ranker_placement
        self.ranker_weighting = ranker_weighting
        # the execution settings, by name (also how a config.json saved before they moved out of it holds some)
        self._execution = ExecutionSettings(**renamed({k: kwargs.pop(k) for k in (*EXECUTION_KEYS, *OLD_NAMES)
                                                       if k in kwargs}))
        self.compressor = compressor
        self.compressor_residual = compressor_residual
        self.mixing_bias = mixing_bias
        self.enricher_bias = enricher_bias
        self.fuser_bias = fuser_bias
        self.residual_scale = residual_scale
        self.final_norm = final_norm
        self.decoder_bias = decoder_bias
        self.norm_eps = norm_eps
        self.dynamic_eps = dynamic_eps
        self.ranker_eps = ranker_eps
        self.embedding_dropout = embedding_dropout
        self.hidden_dropout = hidden_dropout
        self.classifier_dropout = classifier_dropout
        self.initializer = initializer
        self.initializer_range = initializer_range
        self.classifier_head = classifier_head
        self.sparse_prediction = sparse_prediction
        self.normalize_embeddings = normalize_embeddings
        self.matryoshka_dimensions = None if matryoshka_dimensions is None else list(matryoshka_dimensions)
        self.contrastive_scale = contrastive_scale
        self.embedding_kind = embedding_kind
        self.multivector_dim = multivector_dim
        self.context_len = context_len
        self.retrieval_pooling = retrieval_pooling
        self.padding = padding
        self.mixer_types = mixer_types
        if "max_position_embeddings" in kwargs:
            raise ValueError("AveyBConfig has no max_position_embeddings: Avey-B has no position table and takes "
                             "inputs of any length (generic code would read that name as a hard limit); a length the "
                             f"authors' release states is context_len (given {kwargs['max_position_embeddings']!r})")
        unknown = [k for k in kwargs if not k.startswith("_") and k not in TRANSFORMERS_KEYS]
        if unknown:  # a typo would otherwise be saved into config.json and silently ignored by the model
            fields = [p for p in inspect.signature(AveyBConfig.__init__).parameters if p not in ("self", "kwargs")]
            fields += EXECUTION_KEYS
            raise unknown_key(unknown[0], fields, "AveyBConfig's fields are")
        super().__init__(pad_token_id=pad_token_id, tie_word_embeddings=tie_word_embeddings, **kwargs)
        self._validate()
        if self.mixer_types is None:
            self.mixer_types = self._expand_mixer_types()

    # the execution settings (``avey_b.model.execution``), by name: attributes, not saved
    ranker_algorithm = _ExecutionKey()
    ranker_block_size = _ExecutionKey()
    ranker_memory_mb = _ExecutionKey()
    ranker_selection_precision = _ExecutionKey()
    processor_chunk_tokens = _ExecutionKey()
    chunk_tokens = _ExecutionKey("processor_chunk_tokens")  # the old name of processor_chunk_tokens
    tile_bytes = _ExecutionKey()
    order_by_last_split = _ExecutionKey()
    auto_overhead = _ExecutionKey()
    auto_min_splits = _ExecutionKey()

    @property
    def execution(self) -> ExecutionSettings:
        """How models built from this config run, read at every forward pass: the record of the execution settings
        (:class:`avey_b.model.execution.ExecutionSettings`), set by name; not saved."""
        return self._execution

    @execution.setter
    def execution(self, value) -> None:
        raise AttributeError("AveyBConfig.execution is read-only: set an execution setting by name, e.g. "
                             "config.processor_chunk_tokens = 8192 or AveyBConfig(ranker_algorithm='dense')")

    def to_dict(self) -> dict:
        """``PretrainedConfig.to_dict`` without the execution settings: ``config.json`` holds the architecture."""
        out = super().to_dict()
        out.pop("_execution", None)
        return out

    @classmethod
    def from_dict(cls, config_dict: dict, **kwargs):
        """Also reads the authors' release ``config.json`` as the ``avey_b1`` parameterization."""
        if release.is_release_config(config_dict):
            config_dict = release.release_config_to_ours(config_dict)
        return super().from_dict(config_dict, **kwargs)

    # -- derived sizes ---------------------------------------------------------------------------------------
    @property
    def enricher_size(self) -> int:
        """``m``, the enricher's output width."""
        return self.expansion_factor * self.hidden_size

    @property
    def bypass_size(self) -> int:
        """``m_h``, features bypassed to the fuser."""
        return round(self.bypass_proportion * self.enricher_size)

    @property
    def mix_size(self) -> int:
        """``d' = m_t / 2``, width of the gate ``Z_tl`` and of the contextual part ``Z_tr``."""
        return (self.enricher_size - self.bypass_size) // 2

    @property
    def context_size(self) -> int:
        """``C``, tokens each processor block mixes: ``S``, or ``(k+1)S`` without the compressor."""
        if self.ranker != "off" and not self.compressor:
            return (self.num_retrieved_splits + 1) * self.split_size
        return self.split_size

    # -- validation ------------------------------------------------------------------------------------------
    def _validate(self) -> None:
        """Every field in range, every choice one of its options, and the fields consistent with each other: an
        error that names the field, never a shape error deep inside the model."""
        self._validate_sizes()
        self._validate_choices()
        self._validate_numbers()
        self._validate_layers()

    def _validate_sizes(self) -> None:
        """The widths, counts and the enricher's partition (``m = m_h + 2 d'``)."""
        for field in ("vocab_size", "hidden_size", "num_hidden_layers", "split_size", "expansion_factor"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"AveyBConfig.{field} must be an integer >= 1, got {value!r}")
        dims = self.matryoshka_dimensions
        if dims is not None and not all(type(n) is int and 1 <= n <= self.hidden_size for n in dims):
            raise ValueError(f"AveyBConfig.matryoshka_dimensions must list integers from 1 to hidden_size "
                             f"({self.hidden_size}), got {dims!r}")
        k = self.num_retrieved_splits
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise ValueError(f"AveyBConfig.num_retrieved_splits (k) must be an integer >= 0, got {k!r}")
        if not 0.0 <= self.bypass_proportion < 1.0:
            raise ValueError(f"AveyBConfig.bypass_proportion must be in [0, 1), got {self.bypass_proportion!r}")
        m, m_h = self.enricher_size, self.bypass_proportion * self.enricher_size
        if abs(m_h - round(m_h)) > 1e-9 or (m - round(m_h)) % 2 != 0 or m - round(m_h) < 2:
            raise ValueError(
                f"AveyBConfig.bypass_proportion={self.bypass_proportion} with hidden_size={self.hidden_size} and "
                f"expansion_factor={self.expansion_factor} gives m={m}, m_h={m_h}: the bypass m_h must be an "
                "integer and the tail m - m_h a positive even number (it is split into gate and contextual halves)"
            )

    def _validate_choices(self) -> None:
        """The named options, and the ranker placement's needs."""
        _choice("enricher_activation", self.enricher_activation, ACTIVATIONS)
        _choice("mixing_activation", self.mixing_activation, ACTIVATIONS)
        _choice("enricher_layout", self.enricher_layout, ("paper", "release"))
        _choice("parameterization", self.parameterization, ("decoupled", "coupled"))
        _choice("dynamic_normalization", self.dynamic_normalization, DYNAMIC_NORMALIZATIONS)
        _choice("static_weights", self.static_weights, ("signed", "unsigned"))
        _choice("ranker", self.ranker, RANKER_MODES)
        _choice("ranker_weighting", self.ranker_weighting, ("max", "min"))
        _choice("ranker_placement", self.ranker_placement, RANKER_PLACEMENTS)
        if self.ranker_placement == "every_layer":
            if self.ranker == "off":
                raise ValueError("AveyBConfig.ranker_placement='every_layer' needs a ranker, but ranker='off': set "
                                 "ranker to 'unidirectional' or 'bidirectional', or ranker_placement to 'embeddings'")
            if self.execution.ranker_algorithm == "vocabulary":
                raise ValueError(
                    "AveyBConfig.ranker_placement='every_layer' ranks contextualized states, where MaxSim does not "
                    "factor through token ids: ranker_algorithm='vocabulary' cannot hold there; use 'auto' or 'dense'"
                )
        _choice("initializer", self.initializer, ("xavier_normal", "normal"))
        _choice("classifier_head", self.classifier_head, ("linear", "avey-b1"))
        _choice("embedding_kind", self.embedding_kind, ("dense", "sparse"))
        if self.retrieval_pooling is not None:
            _choice("retrieval_pooling", self.retrieval_pooling, RETRIEVAL_POOLINGS)
        _choice("padding", self.padding, PADDINGS)

    def _validate_numbers(self) -> None:
        """Scales, temperatures, epsilons, dropouts and the stated length."""
        if not self.contrastive_scale > 0:
            raise ValueError(f"AveyBConfig.contrastive_scale must be > 0, got {self.contrastive_scale!r}")
        dim = self.multivector_dim
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise ValueError(f"AveyBConfig.multivector_dim must be an integer >= 1, got {self.multivector_dim!r}")
        if self.context_len is not None and (isinstance(self.context_len, bool) or not isinstance(self.context_len, int)
                                             or self.context_len < 1):
            raise ValueError(f"AveyBConfig.context_len must be None or an integer >= 1, got {self.context_len!r}")
        if not self.dynamic_temperature > 0:
            raise ValueError(f"AveyBConfig.dynamic_temperature must be > 0, got {self.dynamic_temperature!r}")
        for field in ("norm_eps", "dynamic_eps", "ranker_eps"):
            if not getattr(self, field) > 0:
                raise ValueError(f"AveyBConfig.{field} must be > 0, got {getattr(self, field)!r}")
        for field in ("embedding_dropout", "hidden_dropout", "classifier_dropout"):
            if not 0.0 <= getattr(self, field) < 1.0:
                raise ValueError(f"AveyBConfig.{field} must be in [0, 1), got {getattr(self, field)!r}")

    def _validate_layers(self) -> None:
        """The layer pattern and the per-layer mixer types, against the number of layers and the parameterization."""
        pattern = self.layer_pattern
        if pattern not in LAYER_PATTERNS:
            if not isinstance(pattern, str) or not pattern or set(pattern) - set("SD"):
                raise ValueError(
                    f"AveyBConfig.layer_pattern={pattern!r} is neither a named pattern {sorted(LAYER_PATTERNS)} "
                    "nor a string of 'S'/'D' letters"
                )
            if len(pattern) != self.num_hidden_layers:
                raise ValueError(
                    f"AveyBConfig.layer_pattern={pattern!r} has {len(pattern)} letters but num_hidden_layers="
                    f"{self.num_hidden_layers}"
                )
        if self.mixer_types is not None:
            if len(self.mixer_types) != self.num_hidden_layers:
                raise ValueError(
                    f"AveyBConfig.mixer_types has {len(self.mixer_types)} entries but num_hidden_layers="
                    f"{self.num_hidden_layers}"
                )
            for t in self.mixer_types:
                _choice("mixer_types[i]", t, ("static", "dynamic", "coupled"))
            if self.parameterization == "coupled" and set(self.mixer_types) != {"coupled"}:
                raise ValueError("AveyBConfig.parameterization='coupled' requires every mixer_types entry to be "
                                 "'coupled'")
            if self.parameterization == "decoupled" and "coupled" in self.mixer_types:
                raise ValueError("AveyBConfig.mixer_types contains 'coupled' but parameterization='decoupled'")

    def _expand_mixer_types(self) -> list[str]:
        if self.parameterization == "coupled":
            return ["coupled"] * self.num_hidden_layers
        pattern = self.layer_pattern
        letters = LAYER_PATTERNS[pattern](self.num_hidden_layers) if pattern in LAYER_PATTERNS else pattern
        return [_LETTER_TO_TYPE[c] for c in letters]


def is_avey_b(config) -> bool:
    """Whether ``config`` (a transformers config, or a ``config.json`` read as a dict) describes an Avey-B: the one
    model-type check of the package (loading, serving, export, analysis, model specs)."""
    model_type = config.get("model_type") if isinstance(config, dict) else getattr(config, "model_type", None)
    return model_type == AveyBConfig.model_type
