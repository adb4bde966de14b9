"""The neural processor of Avey-B: one pre-norm layer, enricher -> [bypass | gate ⊙ σ(mix)] -> fuser.

Notation (the paper's): ``R`` rows processed independently (``B · n_splits``), ``C`` tokens per row (``S``, or
``(k+1)S`` without the compressor), ``d`` model width, ``m`` enricher width, ``d'`` mixing width (``m_t / 2``).

The only difference between a static, a dynamic and a coupled layer is the mixer module; everything else
(enricher, bypass, gate, fuser, residual) is one code path.

Padding: ``keep`` is a ``(R, C)`` bool mask of real tokens, or ``None`` when every position is real. The layer
zeroes the contextual features of padded rows before mixing, so a padded token is a zero vector: it adds nothing
to a static mix, its cosine with every token is 0, and the row normalizations count only real tokens.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import is_traceable_wrapper_subclass
from transformers.modeling_layers import GradientCheckpointingLayer

from .configuration import AveyBConfig
from .similarity import unit_vectors


def _plain_linear(module: nn.Module) -> bool:
    """Whether ``module`` is an ``nn.Linear`` with a plain weight, whose row / column blocks the layer may apply
    one by one; not an adapter (PEFT), nor a weight held as a tensor subclass (torchao's int8 ``quantize_``),
    which run their own forward."""
    return type(module) is nn.Linear and not is_traceable_wrapper_subclass(module.weight)


def _relu2(x: torch.Tensor) -> torch.Tensor:
    r = F.relu(x)
    return r * r  # one multiply; eager `square()` goes through the slower generic pow kernel on CPU


class RMSNorm(nn.Module):
    """``x / sqrt(mean(x²) + eps) · w``. The mean of squares comes from one ``vector_norm`` reduction, which in
    eager mode makes three passes over ``x`` where ``nn.RMSNorm`` makes five or six (same result)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # the statistic in at least float32 (bf16 inputs), never below the input's precision (float64 inputs)
        xf = x.to(torch.promote_types(x.dtype, torch.float32))
        ms = torch.linalg.vector_norm(xf, dim=-1, keepdim=True).square() / x.shape[-1]
        y = x * torch.rsqrt(ms + self.eps).to(x.dtype)
        if torch.is_grad_enabled():
            return y * self.weight.to(x.dtype)
        return y.mul_(self.weight.to(x.dtype))  # inference: no second copy of x (1 GB at 1M tokens of d = 256)


def activation(name: str):
    """The activation functions named in the config (``σ_e`` of the enricher, ``σ`` after the mixing)."""
    if name == "relu2":  # ReLU², the paper's enricher (App. A, A1: makes the cosines non-negative)
        return _relu2
    if name == "relu":
        return F.relu
    if name == "gelu":  # exact (erf) GELU, as in the release
        return F.gelu
    if name == "gelu_tanh":
        return lambda x: F.gelu(x, approximate="tanh")
    if name == "silu":
        return F.silu
    if name == "identity":
        return lambda x: x
    raise ValueError(f"unknown activation {name!r}")


def dynamic_similarity(z: torch.Tensor, keep: torch.Tensor | None, config: AveyBConfig) -> torch.Tensor:
    """``S̃``: the row-normalized cosine-similarity matrix of a dynamic layer (§4.2, Eq. raw-sim/normalization).

    ``z``: (R, C, d') with padded rows already zero.  Returns (R, C, C).
    """
    zn = unit_vectors(z)
    return normalize_rows(zn @ zn.transpose(-1, -2), keep, config)


def normalize_rows(sim: torch.Tensor, keep: torch.Tensor | None, config: AveyBConfig) -> torch.Tensor:
    """Row normalization of the cosine matrix ``S`` (R, C, C), per ``config.dynamic_normalization``.

    Padded columns of ``sim`` are 0 (cosine with a zero vector); the normalizations count real tokens only.
    """
    # an ε below the dtype's smallest normal number (the release's 1e-12 in float16) would round to 0: 0/0 = NaN
    norm, eps = config.dynamic_normalization, max(config.dynamic_eps, torch.finfo(sim.dtype).tiny)
    if norm == "sum":  # the paper: S / (Σ_j S + ε); row-stochastic when S >= 0 (ReLU² enricher)
        return sim / (sim.sum(-1, keepdim=True) + eps)
    if norm == "l1":  # the release: S / max(Σ_j |S|, ε)
        return sim / sim.abs().sum(-1, keepdim=True).clamp_min(eps)
    if norm == "rms":  # S / (rms_j S + ε), the mean taken over real tokens only (padding-invariant)
        n_real = sim.shape[-1] if keep is None else keep.sum(-1).clamp_min(1)[:, None, None].to(sim.dtype)
        # vector_norm has a zero (not NaN) gradient at an all-zero (padding) row, unlike sqrt
        return sim / (torch.linalg.vector_norm(sim, dim=-1, keepdim=True) / n_real**0.5 + eps)
    if norm in ("softmax", "scaled_softmax"):
        logits = sim / config.dynamic_temperature if norm == "scaled_softmax" else sim
        if keep is not None:  # finite fill: an all-padding row gives a uniform (harmless) row, not NaN
            logits = logits.masked_fill(~keep[:, None, :], torch.finfo(logits.dtype).min)
        return logits.softmax(-1)
    return sim  # "none"


class Mixer(nn.Module):
    """Cross-token mixing of ``Z_tr`` (R, C, d') plus the optional per-position bias ``b ∈ R^{C×d'}``."""

    def __init__(self, config: AveyBConfig):
        super().__init__()
        self.config = config
        self.bias = nn.Parameter(torch.zeros(config.context_size, config.mix_size)) if config.mixing_bias else None

    def mix(self, z: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
        raise NotImplementedError  # each layer type defines its mixing

    def forward(self, z: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
        out = self.mix(z, keep)
        return out if self.bias is None else out + self.bias


class StaticMixer(Mixer):
    """Static layer: ``V · Z_tr`` with a learned ``V ∈ R^{C×C}`` (§4.2, Eq. static-layer)."""

    def __init__(self, config: AveyBConfig):
        super().__init__(config)
        c = config.context_size
        self.unsigned = config.static_weights == "unsigned"
        self.weight = nn.Parameter(torch.empty(c, c))

    def matrix(self) -> torch.Tensor:
        """The effective ``V``: non-negative (``|V|``) for the "unsigned" variant."""
        return self.weight.abs() if self.unsigned else self.weight

    def mix(self, z: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
        return self.matrix().to(z.dtype) @ z  # (C, C) @ (R, C, d') broadcasts over R


class DynamicMixer(Mixer):
    """Dynamic layer: ``S̃ · Z_tr``, weights from the input's own cosine similarities (§4.2)."""

    def mix(self, z: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
        return dynamic_similarity(z, keep, self.config) @ z


class CoupledMixer(StaticMixer):
    """Original Avey (coupled): ``(V ⊙ S̃) · Z_tr`` in every layer (Eq. contextualizer; ablation "w/o decoupling")."""

    def mix(self, z: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
        return (self.matrix().to(z.dtype) * dynamic_similarity(z, keep, self.config)) @ z


MIXERS = {"static": StaticMixer, "dynamic": DynamicMixer, "coupled": CoupledMixer}
#: Feature order, per ``enricher_layout``, of the enricher's row blocks (``Z_h``, ``Z_tl``, ``Z_tr``: bypass, gate,
#: contextual) and of the fuser's column blocks (``Z_h``, the mixed ``c``): the paper puts the bypass first.
ENRICHER_BLOCKS = {"paper": ("bypass", "gate", "context"), "release": ("context", "gate", "bypass")}
FUSER_BLOCKS = {"paper": ("bypass", "mix"), "release": ("mix", "bypass")}


class AveyBLayer(GradientCheckpointingLayer):
    """Pre-norm block: enrich -> [bypass | gate ⊙ σ(mix)] -> fuse, + residual. Input and output (R, C, d)."""

    def __init__(self, config: AveyBConfig, layer_idx: int):
        super().__init__()
        d, m_h, d_mix = config.hidden_size, config.bypass_size, config.mix_size
        self.layer_type = config.mixer_types[layer_idx]
        self.norm = RMSNorm(d, eps=config.norm_eps)
        self.enricher = nn.Linear(d, config.enricher_size, bias=config.enricher_bias)
        self.enricher_act = activation(config.enricher_activation)
        self.mixer = MIXERS[self.layer_type](config)
        self.mix_act = activation(config.mixing_activation)
        self.fuser = nn.Linear(m_h + d_mix, d, bias=config.fuser_bias)
        self.dropout = nn.Dropout(config.hidden_dropout)
        # Learned residual gain of the release; a fixed 1 otherwise (the paper's plain residual).
        self.alpha = nn.Parameter(torch.ones(())) if config.residual_scale else None
        # Feature order of the enricher output and of the fuser input (ENRICHER_BLOCKS, FUSER_BLOCKS).
        self.release_layout = config.enricher_layout == "release"
        width = {"bypass": m_h, "gate": d_mix, "context": d_mix, "mix": d_mix}
        self.split_sizes = tuple(width[b] for b in ENRICHER_BLOCKS[config.enricher_layout])
        self.fuser_split = tuple(width[b] for b in FUSER_BLOCKS[config.enricher_layout])

    def forward(self, x: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
        z_h, z_tl, z_tr = self._enrich(self.norm(x), keep)  # Z = σ_e(X U + b) = [Z_h | Z_tl | Z_tr] (Eq. enricher)
        c = z_tl * self.mix_act(self.mixer(z_tr, keep))  # c = Z_tl ⊙ σ(mix(Z_tr)) (Eqs. static-layer, dynamic-layer)
        out = self.dropout(self._fuse(z_h, c))  # [Z_h ‖ c] O (Eq. fuser)
        return out + (x if self.alpha is None else self.alpha * x)  # the residual

    def _enrich(self, h: torch.Tensor, keep: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The enricher (Eq. enricher) on the normalized input h (R, C, d): the bypass ``Z_h``, the gate ``Z_tl`` and
        the contextual part ``Z_tr``, each its own contiguous tensor, ``Z_tr`` zero at padding (so that padded
        tokens add nothing to a mix)."""
        if torch.is_autocast_enabled(h.device.type) and h.dtype == torch.float32:
            h = h.to(torch.get_autocast_dtype(h.device.type))  # once, not once per enricher block (same values)
        # Z = σ_e(X U + b) with the one matrix U, applied as three row blocks so that each part comes out as its
        # own contiguous tensor (mixing a strided slice of Z would cost a copy). When the enricher is not a plain
        # nn.Linear with a plain weight (a PEFT adapter, a quantized layer), it is called as a module so that its
        # own forward runs.
        if _plain_linear(self.enricher):
            w_parts = self.enricher.weight.split(self.split_sizes)
            b_parts = (None,) * 3 if self.enricher.bias is None else self.enricher.bias.split(self.split_sizes)
            parts = [self.enricher_act(F.linear(h, w, b)) for w, b in zip(w_parts, b_parts, strict=True)]
        else:
            parts = [p.contiguous() for p in self.enricher_act(self.enricher(h)).split(self.split_sizes, dim=-1)]
        z_tr, z_tl, z_h = parts if self.release_layout else parts[::-1]  # contextual, gate, bypass: (R, C, ·)
        if keep is not None:
            z_tr = z_tr * keep.unsqueeze(-1).to(z_tr.dtype)
        return z_h, z_tl, z_tr

    def _fuse(self, z_h: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        """The fuser (Eq. fuser): ``[Z_h ‖ c] O`` (the release: ``[c ‖ Z_h] O``), (R, C, d)."""
        first, second = (c, z_h) if self.release_layout else (z_h, c)
        if _plain_linear(self.fuser):  # two products on the weight's column blocks: no concatenated copy
            w_first, w_second = self.fuser.weight.split(self.fuser_split, dim=1)
            return F.linear(first, w_first, self.fuser.bias) + F.linear(second, w_second)
        return self.fuser(torch.cat([first, second], dim=-1))  # an adapted / quantized fuser runs its own forward
