"""From tokenized documents to vectors: a saved Avey-B loaded through :class:`avey_b.Encoder` (the one
way in for inference), run in token-budget batches (:mod:`avey_b.utils.batching`, ``avey-b serve``'s rule)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from avey_b.inference.encoder import Encoder
from avey_b.inference.options import LoadOptions
from avey_b.model.heads import chunk_embeddings, sentence_embedding
from avey_b.model.sparse import sparse_rows, splade_max
from avey_b.utils.batching import token_budget_batches
from avey_b.utils.device import autocast


def local_model_dir(model: str) -> Path:
    """``model`` as a local directory: itself, or a Hub id's config, weights and tokenizer files downloaded (embed
    records the SHA-256 of the files it embeds with)."""
    if Path(model).is_dir():
        return Path(model)
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(model, allow_patterns=["*.json", "*.safetensors", "*.txt", "*.model"]))


def encoder_for(model_dir: str | Path, *, device: str, precision: str, threads: int | None = None) -> Encoder:
    """The encoder embed runs: any head's checkpoint or a bare backbone, embedding with its backbone, on
    ``threads`` CPU threads (None: :func:`avey_b.utils.device.set_cpu_threads`'s default)."""
    return Encoder(model_dir, LoadOptions(device=device, precision=precision, threads=threads))


@torch.no_grad()
def token_vectors_of(encoder: Encoder, ids: list[list[int]], max_batch_tokens: int) -> list[np.ndarray]:
    """Each document's ``(n, D)`` float32 token vectors (the multi-vector head's: :meth:`Encoder.token_vectors`,
    every token, special tokens included), in the order of ``ids``; a forward of its own, apart from the dense
    vectors'."""
    encoder.load()
    out: list[np.ndarray | None] = [None] * len(ids)
    for batch in token_budget_batches(range(len(ids)), max_batch_tokens, lambda i: len(ids[i])):
        tokens, mask = encoder.pad([ids[i] for i in batch])
        vectors = encoder.token_vectors(tokens, mask).cpu().numpy()
        for row, i in enumerate(batch):
            out[i] = vectors[row, :len(ids[i])]
    return out


@torch.no_grad()
def embed_ids(encoder: Encoder, ids: list[list[int]], chunks: list[list[tuple[int, int]]] | None,
              max_batch_tokens: int, sparse: bool = False) -> tuple[list[torch.Tensor], list[tuple] | None]:
    """Float32 vectors on the CPU: ``(d,)`` per document, or ``(n_chunks, d)`` with ``chunks`` (token ranges per
    document, late chunking: one forward over the whole document), in the order of ``ids``; with ``sparse``, also
    each document's SPLADE ``(indices, values)`` from the same hidden states (:meth:`Encoder.sparse`), else None."""
    encoder.load()
    if sparse:
        encoder.require_sparse()
    normalize = bool(getattr(encoder.config, "normalize_embeddings", True))
    out: list[torch.Tensor | None] = [None] * len(ids)
    weights: list[tuple | None] = [None] * len(ids)
    for batch in token_budget_batches(range(len(ids)), max_batch_tokens, lambda i: len(ids[i])):
        tokens, mask = encoder.pad([ids[i] for i in batch])
        hidden = encoder.hidden_states(tokens, mask)
        mask = mask.to(hidden.device)
        if chunks is None:
            vectors = list(sentence_embedding(hidden, mask, normalize).float().cpu())
        else:
            vectors = [v.float().cpu() for v in chunk_embeddings(hidden, mask, [chunks[i] for i in batch], normalize)]
        for i, v in zip(batch, vectors, strict=True):
            out[i] = v
        if sparse:
            with autocast(encoder.device, encoder.bf16):
                rows = sparse_rows(splade_max(hidden, mask, encoder.model.decoder))
            for i, row in zip(batch, rows, strict=True):
                weights[i] = row
    return out, weights if sparse else None
