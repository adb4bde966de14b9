"""The attention implementations a Transformer baseline is timed with, and how each is made ready for a length.

A speed claim against ModernBERT (or the NeoBERT stand-in) holds against its *fastest* attention on the machine,
not only the default one. transformers offers, for these models:

``sdpa``               ``torch.nn.functional.scaled_dot_product_attention``: ModernBERT's sliding-window layers
                       (window 128) pass a dense ``N × N`` mask, so they cost as much as its global layers.
``flex_attention``     PyTorch's FlexAttention (``torch.nn.attention.flex_attention``), a compiled kernel that
                       skips the fully masked blocks: ModernBERT's sliding-window layers then cost ``O(N · window)``.
                       The same outputs as ``sdpa`` (the tests check it). transformers compiles the kernel once,
                       with dynamo's default dynamic-shape handling: the first length gets a kernel for its shape
                       and the next one a recompiled *dynamic-shape* kernel, which was measured 1.7× slower at 8K
                       tokens on an H200 than a kernel compiled for 8K alone. :func:`static_shapes` compiles it for
                       each length with static shapes.
``flash_attention_2``  the ``flash-attn`` package's kernels: CUDA only, and only where ``flash-attn`` is
                       installed (:func:`unavailable_reason` says which is missing).
``eager``              attention written out in PyTorch (what the authors' EncodEval configs set).
``default``            no choice passed: whichever transformers picks (``sdpa`` where it can), as the authors'
                       efficiency scripts built their baselines.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from .options import ATTENTIONS


def unavailable_reason(attn: str, device: torch.device | str) -> str | None:
    """Why ``attn`` cannot run on ``device`` here (``None`` when it can): an unknown name, FlashAttention-2 off
    CUDA or without ``flash-attn``, FlexAttention missing from this torch."""
    from transformers.utils import is_flash_attn_2_available, is_torch_flex_attn_available

    device = torch.device(device)
    if attn not in ATTENTIONS:
        return f"unknown attention {attn!r}: use one of {ATTENTIONS}"
    if attn == "default":  # whatever transformers picks: it runs wherever the model does
        return None
    if attn == "flash_attention_2":
        if device.type != "cuda":
            return "flash_attention_2 runs on CUDA GPUs only (flash-attn has no CPU kernels)"
        if not is_flash_attn_2_available():
            return "flash_attention_2 needs the flash-attn package, which is not installed"
    if attn == "flex_attention" and not is_torch_flex_attn_available():
        return f"flex_attention needs torch >= 2.5 (this is {torch.__version__})"
    return None


def available(attns: list[str] | tuple[str, ...], device: torch.device | str) -> dict[str, str | None]:
    """``{attn: None if it runs here else the reason}`` for each of ``attns``."""
    return {a: unavailable_reason(a, device) for a in attns}


def is_compiled(attn: str | None) -> bool:
    """Whether ``attn`` runs a kernel compiled on first use (then compile it per length: :func:`static_shapes`)."""
    return attn == "flex_attention"


#: dynamo's limit on the kernels kept for one function while :func:`static_shapes` is active (each length and each
#: of ModernBERT's two masks, global and sliding-window, gets its own flex_attention kernel).
RECOMPILE_LIMIT = 64


@contextlib.contextmanager
def static_shapes(reset: bool = True) -> Iterator[None]:
    """Compile whatever compiles inside for its own shapes: automatic dynamic shapes off (a new length gets a kernel
    compiled for it, not a dynamic-shape one) and room for a kernel per length. With ``reset`` dynamo's caches are
    emptied on entry, so nothing compiled for another length is reused; without it, a model compiled elsewhere with
    ``dynamic=True`` keeps its one graph. Enter it around the warm-up call (which compiles) and the timed calls."""
    if reset:
        torch._dynamo.reset()
    with torch._dynamo.config.patch(automatic_dynamic_shapes=False, recompile_limit=RECOMPILE_LIMIT):
        yield
