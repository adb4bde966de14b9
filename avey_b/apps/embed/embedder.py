"""From tokenized documents to vectors: a saved Avey-B loaded through :class:`avey_b.Encoder` (the one
way in for inference), run in token-budget batches (:mod:`avey_b.utils.batching`, ``avey-b serve``'s rule)."""

from __future__ import annotations

from pathlib import Path

from avey_b.inference.encoder import Encoder
from avey_b.inference.options import LoadOptions


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


def embed_ids(encoder: Encoder, ids: list[list[int]], chunks: list[list[tuple[int, int]]] | None,
              max_batch_tokens: int, outputs: tuple[str, ...] = ("dense",)) -> dict[str, list]:
    """Each of ``outputs`` for each document, in the order of ``ids``, from one forward per batch
    (:meth:`Encoder.encode`), as numpy arrays on the CPU: ``dense`` float32 ``(d,)``, or ``(n_chunks, d)`` with
    ``chunks`` (token ranges per document, late chunking: one forward over the whole document); ``sparse``
    ``(indices, values)``; ``multivector`` ``(n, D)`` token vectors."""
    encoder.load()
    found = encoder.encode(ids, outputs=tuple(outputs), chunks=chunks, batch_tokens=max_batch_tokens)
    return {o: [tuple(x.numpy() for x in v) if o == "sparse" else v.numpy() for v in values]
            for o, values in found.items()}
