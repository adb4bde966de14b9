"""The model wrapper of ``avey-b embed``: a saved Avey-B and its tokenizer, turning tokenized documents into vectors
in token-budget batches (:mod:`avey_b.utils.batching`, ``avey-b serve``'s rule)."""

from __future__ import annotations

import os
from pathlib import Path

import torch
from transformers import AutoConfig, AutoTokenizer

import avey_b
from avey_b.model.heads import chunk_embeddings, sentence_embedding
from avey_b.utils.batching import pad_right, token_budget_batches
from avey_b.utils.device import autocast, pick_device, use_bf16


def local_model_dir(model: str) -> Path:
    """``model`` as a local directory: itself, or a Hub id's config, weights and tokenizer files downloaded."""
    if Path(model).is_dir():
        return Path(model)
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(model, allow_patterns=["*.json", "*.safetensors", "*.txt", "*.model"]))


class Embedder:
    """A saved Avey-B (any head, or the bare backbone) and its tokenizer, loaded once, turning tokenized documents
    into vectors in token-budget batches: one per document, or one per chunk (late chunking)."""

    def __init__(self, model_dir: str | os.PathLike, *, device: str = "auto", precision: str = "auto"):
        config = AutoConfig.from_pretrained(model_dir)
        if getattr(config, "model_type", None) != "avey-b":
            raise ValueError(f"{model_dir} holds a {getattr(config, 'model_type', None)!r} model: avey-b embed "
                             "embeds with Avey-B")
        self.architecture = (config.architectures or ["AveyBModel"])[0]
        self.config, self.device = config, pick_device(device)
        self.bf16 = use_bf16(precision, self.device)
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.model_dir, self.model = Path(model_dir), None
        self.forwards = 0

    def load(self) -> None:
        """Load the weights (separate from ``__init__``, so that settings are checked before that cost)."""
        if self.model is None:
            cls = getattr(avey_b, self.architecture, None) or avey_b.AveyBModel
            self.model = cls.from_pretrained(self.model_dir).to(self.device).eval()
            self.backbone = getattr(self.model, "model", self.model)

    def tokenize(self, texts: list[str], offsets: bool) -> dict:
        if offsets and not self.tokenizer.is_fast:
            raise ValueError("late chunking maps characters to tokens with a fast tokenizer's offsets; this model's "
                             "tokenizer is not a fast one")
        return self.tokenizer(texts, truncation=False, verbose=False, return_offsets_mapping=offsets,
                              return_special_tokens_mask=offsets)

    @torch.no_grad()
    def forward(self, ids: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """The backbone's last hidden state of a right-padded batch, and its attention mask."""
        batch, mask = pad_right(ids, self.tokenizer.pad_token_id)
        batch, mask = batch.to(self.device), mask.to(self.device)
        self.forwards += 1
        with autocast(self.device, self.bf16):
            return self.backbone(input_ids=batch, attention_mask=mask).last_hidden_state, mask

    def embed(self, ids: list[list[int]], chunks: list[list[tuple[int, int]]] | None, max_batch_tokens: int
              ) -> list[torch.Tensor]:
        """Float32 vectors on the CPU: ``(d,)`` per document, or ``(n_chunks, d)`` with ``chunks`` (token ranges
        per document), in the order of ``ids``."""
        self.load()
        normalize = bool(getattr(self.config, "normalize_embeddings", True))
        out: list[torch.Tensor | None] = [None] * len(ids)
        for batch in token_budget_batches(range(len(ids)), max_batch_tokens, lambda i: len(ids[i])):
            hidden, mask = self.forward([ids[i] for i in batch])
            if chunks is None:
                vectors = list(sentence_embedding(hidden, mask, normalize).float().cpu())
            else:
                vectors = [v.float().cpu() for v in chunk_embeddings(hidden, mask, [chunks[i] for i in batch],
                                                                     normalize)]
            for i, v in zip(batch, vectors, strict=True):
                out[i] = v
        return out
