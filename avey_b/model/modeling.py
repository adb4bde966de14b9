"""Avey-B backbone: embed -> rank -> compress -> L processor layers -> reassemble.

Paper: "Avey-B" (Acharya & Hammoud, ICLR 2026): §3 (ranker, neural processor) and §4 (bidirectional
contextualization, decoupled parametrization, neural compression).

Notation (the paper's): ``B`` batch, ``N`` sequence length, ``S`` split size, ``n = ceil(N/S)`` splits, ``k`` retrieved
splits, ``d`` width, ``L`` layers, ``V`` vocabulary, ``C`` tokens per processor row (``config.context_size``: ``S``;
``(k+1)S`` without the compressor).

Notable choices:
- Any ``N >= 1``: the sequence is zero-padded to ``n·S`` after embedding and the padding dropped at the end.
- Split padding and user padding (``attention_mask == 0``) are the same thing: a ``keep`` mask that the ranker,
  the compressor and every mixing layer honour, so real tokens never see padding (this library's padding
  semantics; the release ignores padding). Padding may sit anywhere (left, right, in between): each row's real
  tokens are moved to its front before the splits are cut and put back after, so the real tokens' outputs equal
  those of the unpadded sequence. Splits with no real token skip the processor; rows of different lengths are
  ranked each over its own splits. This bookkeeping lives in :mod:`avey_b.model.splits` (cut, then restore).
  ``config.padding="release"`` reproduces the authors' release instead: ``attention_mask`` is ignored and both
  kinds of padding are processed as tokens (:func:`avey_b.model.splits.cut_as_release`).
- The ranker runs once, on the embedding output; the processor sees ``(B·n, C, d)`` rows, independent of ``N``,
  which is why the processor's cost is linear in ``N``; it runs them in chunks, eager and compiled alike, so its
  memory is linear in ``N`` too. The ablation ``ranker_placement="every_layer"`` (appendix
  "Ablation Study") ranks, concatenates and compresses again before every layer, on that layer's input.
- Every variant of the paper's ablations (§5.2 and appendix) is a config switch on this one code path.
- What ``from_pretrained`` and ``save_pretrained`` add to transformers' (the authors' release checkpoints, the code
  saved beside the weights) lives in :mod:`avey_b.model.loading`; the bad-input checks of ``forward`` close this file.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn
from transformers import PreTrainedModel, logging
from transformers import initialization as init
from transformers.modeling_outputs import BaseModelOutput

from . import loading, splits
from .configuration import AveyBConfig
from .layers import AveyBLayer, Mixer, RMSNorm, StaticMixer
from .ranker import Choice, Compressor, Ranker

logger = logging.get_logger(__name__)


class AveyBPreTrainedModel(PreTrainedModel):
    """Weight initialization and the Hugging Face contract shared by the backbone and every head.

    Initialization (``config.initializer``):

    | parameter                                   | "xavier_normal" (default, as the release) | "normal"            |
    |---------------------------------------------|-------------------------------------------|---------------------|
    | Linear / Embedding weights, static ``V``, ``P`` | Xavier-normal                          | N(0, init. range)   |
    | biases (enricher, fuser, heads, mixing)     | 0                                         | 0                   |
    | RMSNorm weights, residual ``alpha``         | 1                                         | 1                   |
    """

    config_class = AveyBConfig
    config: AveyBConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _no_split_modules = ["AveyBLayer"]
    _supports_sdpa = False
    _supports_flash_attn = False

    def _check_and_adjust_attn_implementation(self, attn_implementation: str | None, *args, **kwargs) -> str:
        """transformers' ``attn_implementation`` (a keyword of ``from_pretrained`` / ``from_config``, and
        ``set_attn_implementation``) picks how attention is computed. Avey-B has no attention (§3: a ranker and a
        neural processor of enricher, contextualizer and fuser), so every value is accepted, none changes what runs
        or what it computes, and one other than ``eager`` (what transformers records for a model without attention
        layers) gets a warning saying so. Code that passes the same keyword to every model (``"sdpa"``, a flash
        kernel) then loads Avey-B too. How Avey-B runs is chosen by its execution settings
        (:mod:`avey_b.model.execution`)."""
        if attn_implementation not in (None, "eager"):
            logger.warning_once(
                f"attn_implementation={attn_implementation!r} is ignored: Avey-B has no attention layers, so there is "
                "no attention implementation to choose and the model computes the same with any (its execution "
                "settings, e.g. processor_chunk_tokens or ranker_algorithm, choose how it runs)")
        return "eager"

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
        """``PreTrainedModel.from_pretrained``, which also reads the authors' release checkpoints (a hub repo id such
        as ``avey-ai/avey-b1-base-exp`` or a local download, converted in memory), refuses another architecture's
        checkpoint and names a damaged weights file: :func:`avey_b.model.loading.from_pretrained`."""
        return loading.from_pretrained(cls, super().from_pretrained, pretrained_model_name_or_path, *model_args,
                                       **kwargs)

    def save_pretrained(self, save_directory, *args, **kwargs):
        """``PreTrainedModel.save_pretrained``, plus the model's code beside the weights (``avey_b_*.py``, recorded
        in the config's ``auto_map``): the directory loads with ``trust_remote_code=True`` where this package is
        not installed. Where it is, transformers uses the installed classes and the saved code does not run
        (:func:`avey_b.model.loading.save_pretrained`)."""
        loading.save_pretrained(self, super().save_pretrained, save_directory, *args, **kwargs)

    def _init_matrix(self, weight: torch.Tensor) -> None:
        if self.config.initializer == "xavier_normal":
            init.xavier_normal_(weight)
        else:
            init.normal_(weight, mean=0.0, std=self.config.initializer_range)

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding, StaticMixer, Compressor)):
            self._init_matrix(module.weight)
        if isinstance(module, nn.Linear) and module.bias is not None:
            init.zeros_(module.bias)
        elif isinstance(module, Mixer) and module.bias is not None:
            init.zeros_(module.bias)
        elif isinstance(module, RMSNorm):
            init.ones_(module.weight)
        elif isinstance(module, AveyBLayer) and module.alpha is not None:
            init.ones_(module.alpha)


class AveyBModel(AveyBPreTrainedModel):
    """The Avey-B encoder: ``(B, N)`` token ids -> ``(B, N, d)`` contextual states, for any ``N >= 1``."""

    # The multi-vector head's projection, saved beside the backbone in its checkpoint: sentence-transformers loads that
    # directory's backbone as this class and the projection from its own folder (1_Dense/), so the key is expected
    # to be left out here (other heads' weights left out are still reported).
    _keys_to_ignore_on_load_unexpected = [r"^projection\.weight$"]

    def __init__(self, config: AveyBConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.embed_dropout = nn.Dropout(config.embedding_dropout)
        self.ranker = Ranker(config) if config.ranker != "off" else None
        # The ablation "ranker at every layer" (appendix "Ablation Study"): the choice and the rows are made again
        # before each layer, each with its own compressor P_ℓ. The paper places the compressor "within the ranker"
        # (§4.3); a ranker invoked before every layer compresses states of a different depth each time, so one
        # learned P per invocation is our reading (one shared P would tie them together).
        self.every_layer = self.ranker is not None and config.ranker_placement == "every_layer"
        compress = self.ranker is not None and config.compressor
        self.compressor = Compressor(config) if compress and not self.every_layer else None
        self.compressors = (nn.ModuleList(Compressor(config) for _ in range(config.num_hidden_layers))
                            if compress and self.every_layer else None)
        self.layers = nn.ModuleList(AveyBLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, eps=config.norm_eps) if config.final_norm else None
        self.gradient_checkpointing = False
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embed_tokens = value

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        token_type_ids: torch.Tensor | None = None,  # accepted for tokenizer compatibility; Avey-B has no segments
        position_ids: torch.Tensor | None = None,  # accepted and unused: positions live in the static matrices
        output_attentions: bool | None = None,  # accepted as transformers' encoders do: Avey-B has no attention
        **kwargs,  # what the ecosystem passes along (PEFT, Trainer): nothing here changes the computation
    ) -> BaseModelOutput | tuple:
        config = self.config
        _refuse_tracing()
        _check_inputs(config, input_ids, inputs_embeds, attention_mask)
        output_hidden_states = config.output_hidden_states if output_hidden_states is None else output_hidden_states
        return_dict = config.return_dict if return_dict is None else return_dict

        # 1. Embed and cut into splits of S tokens (§3.1). Under torch.compile or torch.export the graph must not
        # branch on values: every bookkeeping step of the cut is taken.
        x, ids = self._embed(input_ids, inputs_embeds)  # (B, N, d); ids: the token ids x embeds exactly, or None
        all_hidden = [x] if output_hidden_states else None
        if config.padding == "release":  # the authors' release: no mask, padding processed as tokens
            sp = splits.cut_as_release(x, ids, config.split_size, general=torch.compiler.is_compiling())
        else:
            sp = splits.cut(x, attention_mask, ids, config.split_size, general=torch.compiler.is_compiling())

        if self.every_layer:  # the ablation: a new choice, new rows, before every layer
            h = self._rank_every_layer(sp, all_hidden)  # (R, S, d)
        else:
            # 2. Rank (§3.1): the top-k splits of every split, chosen once, on the embeddings.
            choice = None if self.ranker is None else self.ranker(sp.x, sp.keep, sp.ids)  # idx, filled: (B, n, k)
            # 3-4. Each split with its weighted retrieved splits, compressed (§4.3), through the L layers (§3.2).
            h = self.process(sp, choice, all_hidden=all_hidden)  # (R, S, d)

        # 5. Reassemble: each split's own outputs, back in the input's order, without split padding.
        out = self.finish(sp.restore(h))  # (B, N, d)
        hidden_states = tuple(all_hidden) if output_hidden_states else None
        if not return_dict:
            return tuple(v for v in (out, hidden_states) if v is not None)
        return BaseModelOutput(last_hidden_state=out, hidden_states=hidden_states)

    def _embed(self, input_ids: torch.Tensor | None, inputs_embeds: torch.Tensor | None
               ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The embedding output ``x`` (B, N, d), on which the ranker runs (§3.1), and the vocabulary gate: the token
        ids that ``x`` embeds exactly, else None. The ranker's vocabulary path factors MaxSim through those ids,
        which is exact only when ``x`` is their embedding: not for ``inputs_embeds``, nor under active embedding
        dropout."""
        if inputs_embeds is not None:
            return self.embed_dropout(inputs_embeds), None
        exact = not (self.training and self.embed_dropout.p > 0)
        return self.embed_dropout(self.embed_tokens(input_ids)), input_ids if exact else None

    def process(self, sp: splits.Splits, choice: Choice | None, rows: torch.Tensor | None = None, *,
                all_hidden: list | None = None) -> torch.Tensor:
        """The neural processor (§3.2) on the rows of the splits ``rows`` of ``sp`` (indices into its ``B·n`` flat
        splits; None: :attr:`~avey_b.model.splits.Splits.row_ids`): each split after its weighted retrieved splits
        (the ranker's ``choice``, §3.1), compressed to ``S`` tokens (§4.3), through the ``L`` layers. Returns
        (R, S, d), each split's own outputs, before :meth:`finish`.

        Rows are independent after the choice, so they run in chunks of about ``processor_chunk_tokens`` tokens
        (:class:`~avey_b.model.execution.ExecutionSettings`): memory linear in ``N``. All rows at once where every
        layer's states are appended to ``all_hidden``, and in an exported graph, which must hold for every length
        (a number of chunks would freeze it)."""
        if torch.compiler.is_exporting():
            return self._process_rows(sp, choice, sp.row_ids if rows is None else rows, self.compressor, self.layers)
        tokens = self.config.execution.processor_chunk_tokens_for(sp.x.device.type)
        chunk = None if all_hidden is not None else max(1, tokens // self.config.context_size)
        return self._process_in_chunks(sp, choice, rows, chunk, all_hidden)

    def finish(self, hidden: torch.Tensor) -> torch.Tensor:
        """What follows the layers: the final norm (``config.final_norm``), token by token, on the processor's
        outputs ((B, N, d) restored, or (R, S, d) rows). Returns the last hidden state."""
        return hidden if self.norm is None else self.norm(hidden)

    @torch.compiler.disable(recursive=False)
    def _process_in_chunks(self, sp: splits.Splits, choice: Choice | None, rows: torch.Tensor | None,
                           chunk: int | None, all_hidden: list | None = None) -> torch.Tensor:
        """:meth:`process` of the splits ``rows``, ``chunk`` rows at a time (chunks of equal size within a row;
        None: all rows at once), each chunk by :meth:`_process_rows`.

        Under ``torch.compile`` this loop runs outside the graph (``recursive=False``: only this frame), since the
        number of chunks depends on the length, and each chunk, :meth:`_process_rows`, is compiled: one graph
        serves every chunk, and a compiled forward holds one chunk's activations at a time, as an eager one does.
        ``torch.export`` refuses such a frame: an exported graph runs :meth:`_process_rows` on every row."""
        rows = sp.row_ids if rows is None else rows
        chunks = [rows] if chunk is None else rows.tensor_split(-(-rows.numel() // chunk))
        if len(chunks) == 1:
            return self._process_rows(sp, choice, rows, self.compressor, self.layers, all_hidden)
        out, start = None, 0  # filled chunk by chunk: no list of chunks to concatenate (a second copy of every output)
        for sel in chunks:
            h = self._process_rows(sp, choice, sel, self.compressor, self.layers)
            if out is None:
                out = h.new_empty(rows.numel(), *h.shape[1:])
            out[start:start + h.shape[0]] = h
            start += h.shape[0]
        return out

    def _process_rows(self, sp: splits.Splits, choice: Choice | None, sel, compressor: Compressor | None,
                      layers, all_hidden: list | None = None) -> torch.Tensor:
        """The rows of the splits ``sel`` (a slice or indices into the ``B·n`` splits of ``sp.x``) through
        ``layers``: (R, S, d), each split's own outputs.

        A split's row is the split after its retrieved ones, weighted (the ranker's weighted selective split on
        ``choice``, §3.1), compressed to ``S`` tokens by ``compressor`` (§4.3); without the ranker (ablation) the
        split alone; without the compressor (ablation, ``compressor=None``) ``(k+1)S`` tokens, of which the split's
        own outputs are kept. With ``all_hidden`` (``sel`` holds every split), each layer's output is appended to it
        in ``(B, N, d)``."""
        S = sp.x.shape[2]
        x, keep = sp.flat_x, sp.flat_keep
        if choice is None:
            h, h_keep = x[sel], None if keep is None else keep[sel]
        else:
            h, h_keep = self.ranker.weighted_selective_split(choice, sel)  # X_cat: (R, (k+1)S, d)
            if compressor is not None:
                h, h_keep = compressor(h, x[sel]), None if keep is None else keep[sel]  # X̂: (R, S, d)
        for layer in layers:
            h = layer(h, h_keep)
            if all_hidden is not None:
                all_hidden.append(sp.restore(h))
                # continue from the returned tensor (on the gradient path) where the rows are the splits: S tokens,
                # or the last layer's outputs, of which only the split's own are kept
                if h.shape[1] == S or layer is layers[-1]:
                    h = sp.recut(all_hidden[-1])
        return h[:, -S:]

    def _rank_every_layer(self, sp: splits.Splits, all_hidden: list | None) -> torch.Tensor:
        """The ablation ``ranker_placement="every_layer"`` (appendix "Ablation Study": "the ranker at every layer
        such that it operates on contextualized embeddings"). Before layer ℓ, the ranker chooses the top-``k``
        splits of every split on the layer's input — each split's current states, ``(B, n, S, d)``, zero at
        padding — and the rows are rebuilt from those states: weighted retrieved splits, the split last, compressed
        by ``P_ℓ`` (or ``(k+1)S`` tokens without the compressor, of which the split's own outputs are kept).

        Every layer takes all rows at once: the next choice needs every split's states. Appends each layer's output
        to ``all_hidden`` when given. Returns the last layer's rows (R, S, d)."""
        rows = slice(None) if sp.rows is None else sp.rows
        states = sp
        for i, layer in enumerate(self.layers):
            # The first layer's input is the embedding output, where MaxSim factors through the token ids (the
            # vocabulary path is exact: same choice, less work). Deeper inputs are contextualized — equal ids no
            # longer have equal vectors — so the choice there takes the dense path (no ids).
            choice = self.ranker(states.x, sp.keep, sp.ids if i == 0 else None)
            compressor = None if self.compressors is None else self.compressors[i]
            h = self._process_rows(states, choice, rows, compressor, [layer], all_hidden)  # (R, S, d)
            if i + 1 < len(self.layers):
                states = dataclasses.replace(sp, x=self._split_states(sp, h), ids=None)
        return h

    @staticmethod
    def _split_states(sp: splits.Splits, h: torch.Tensor) -> torch.Tensor:
        """Processor rows (R, S, d) -> the splits' states (B, n, S, d), zeros at padding and in empty splits (as
        :func:`avey_b.model.splits.cut` leaves the embeddings): what the ranker and the compressor take."""
        B, n, S, d = sp.x.shape
        if sp.rows is not None:
            h = h.new_zeros(B * n, S, d).index_copy(0, sp.rows, h)
        x = h.reshape(B, n, S, d)
        return x if sp.keep is None else x * sp.keep.unsqueeze(-1).to(x.dtype)


def _refuse_tracing() -> None:
    if torch.jit.is_tracing():
        raise NotImplementedError(
            "Avey-B does not support TorchScript tracing (torch.onnx.export(..., dynamo=False) or torch.jit.trace): "
            "its split count and retrieval depend on the input length, which a trace would freeze. Use "
            "torch.export.export or torch.onnx.export(..., dynamo=True) (dynamic batch and length: "
            "avey_b.apps.export), or "
            "torch.compile(model, dynamic=True) for every length."
        )


def _check_inputs(
    config: AveyBConfig,
    input_ids: torch.Tensor | None,
    inputs_embeds: torch.Tensor | None,
    attention_mask: torch.Tensor | None,
) -> None:
    """Clear, early errors for bad input (names the problem, never a shape error deep inside the model)."""
    if (input_ids is None) == (inputs_embeds is None):
        raise ValueError("pass exactly one of input_ids or inputs_embeds")
    if input_ids is not None:
        if input_ids.is_floating_point() or input_ids.is_complex() or input_ids.dtype == torch.bool:
            raise TypeError(f"input_ids must be an integer tensor of token ids, got dtype {input_ids.dtype}")
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must have shape (batch, length), got {tuple(input_ids.shape)}")
        shape = tuple(input_ids.shape)
    else:
        if not inputs_embeds.is_floating_point():
            raise TypeError(f"inputs_embeds must be a floating-point tensor, got dtype {inputs_embeds.dtype}")
        if inputs_embeds.dim() != 3 or inputs_embeds.shape[-1] != config.hidden_size:
            raise ValueError(
                f"inputs_embeds must have shape (batch, length, {config.hidden_size}), got {tuple(inputs_embeds.shape)}"
            )
        shape = tuple(inputs_embeds.shape[:2])
    if shape[0] == 0:
        raise ValueError("empty batch: the input has batch size 0")
    if shape[1] == 0:
        raise ValueError("empty sequences: the input has length 0 (Avey-B needs at least one token)")
    if attention_mask is not None and tuple(attention_mask.shape) != shape:
        raise ValueError(
            f"attention_mask has shape {tuple(attention_mask.shape)} but the input has shape (batch, length) = {shape}"
        )
    if torch.compiler.is_compiling():
        return  # the value checks below need a host sync; eager runs catch these errors
    if input_ids is not None:
        lo, hi = int(input_ids.min()), int(input_ids.max())
        if lo < 0 or hi >= config.vocab_size:
            raise ValueError(
                f"input_ids out of range: found ids in [{lo}, {hi}] but the vocabulary has {config.vocab_size} "
                "entries (valid ids are 0 .. vocab_size-1); is the tokenizer matched to this model?"
            )
    if attention_mask is not None and not attention_mask.dtype == torch.bool:
        if not bool(((attention_mask == 0) | (attention_mask == 1)).all()):
            raise ValueError("attention_mask must contain only 0 (padding) and 1 (real token)")
