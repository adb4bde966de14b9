"""The compute of ``avey-b embed``: from documents to a shard's rows. A saved Avey-B loaded through
:class:`avey_b.Encoder` (the one way in for inference) tokenizes each shard's documents and encodes them in
token-budget batches (:meth:`Encoder.encode <avey_b.inference.encoder.Encoder.encode>`, ``avey-b serve``'s rule),
a long one in pieces (:class:`avey_b.apps.embed.streamed.Pieces`); :mod:`avey_b.apps.embed.shards` stores the
rows."""

from __future__ import annotations

from pathlib import Path

from avey_b.apps.embed import shards
from avey_b.apps.embed.inputs import Document
from avey_b.apps.embed.options import LONG_DOCUMENT_TOKENS
from avey_b.apps.embed.shards import Settings
from avey_b.inference.chunks import chunk_ranges
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


# ------------------------------------------------------------------------------------------------ one shard
def prepare_shard(encoder: Encoder, docs: list[Document], settings: Settings
                  ) -> tuple[list[tuple[Document, list[int], list | None]], list[dict]]:
    """One shard's documents as ``(document, token ids, chunk ranges or None)`` in input order, and its skipped
    documents (longer than ``max_tokens``, or with no text token to chunk)."""
    late = settings.chunking == "late"
    if not docs:
        return [], []
    enc = encoder.tokenize([d.text for d in docs], offsets=late)
    work, skipped = [], []
    for i, doc in enumerate(docs):
        ids = enc["input_ids"][i]
        if len(ids) > settings.max_tokens:
            skipped.append({"id": doc.id, "n_tokens": len(ids),
                            "reason": f"longer than max_tokens ({settings.max_tokens:,}); never cut"})
            continue
        ranges = None
        if late:
            try:
                ranges = chunk_ranges(enc["offset_mapping"][i], enc["special_tokens_mask"][i],
                                      chunk_tokens=settings.chunk_tokens, char_spans=doc.spans,
                                      overlap=settings.chunk_overlap or 0)
            except ValueError as error:
                raise ValueError(f"{doc.where}: {error}") from None
            if not ranges:
                skipped.append({"id": doc.id, "n_tokens": len(ids), "reason": "no text tokens to chunk"})
                continue
        work.append((doc, ids, ranges))
    return work, skipped


def embed_whole(encoder: Encoder, work: list[tuple], late: bool, max_batch_tokens: int,
                outputs: tuple[str, ...] = ("dense",)) -> dict[str, list]:
    """``outputs`` of ``work`` (:func:`prepare_shard`'s items), each document encoded whole, in batches, one forward
    for all of them (:func:`avey_b.apps.embed.embedder.embed_ids`)."""
    chunks = [[r[:2] for r in ranges] for _, _, ranges in work] if late else None
    return embed_ids(encoder, [ids for _, ids, _ in work], chunks, max_batch_tokens, outputs)


def shard_rows(work: list[tuple], found: dict[str, list], late: bool) -> list[dict]:
    """The shard's rows: one per document, or per late chunk, with each output ``found`` for it (``found[kind][i]``
    of ``work[i]``): ``vector`` (``(d,)``, or ``(C, d)`` split into the chunks' rows), ``sparse``, ``multivector``."""
    rows = []
    for n, (doc, ids, ranges) in enumerate(work):
        if not late:
            rows.append({"id": doc.id, "n_tokens": len(ids), "text": doc.text, "doc": doc,
                         **{"vector" if kind == "dense" else kind: values[n] for kind, values in found.items()}})
            continue
        for c, (t0, t1, c0, c1) in enumerate(ranges):
            rows.append({"id": doc.id, "chunk": c, "char_start": c0, "char_end": c1, "n_tokens": t1 - t0,
                         "text": doc.text[c0:c1], "doc": doc, "vector": found["dense"][n][c]})
    return rows


def embed_shard(encoder: Encoder, docs: list[Document], settings: Settings, max_batch_tokens: int,
                long_tokens: int) -> tuple[list[dict], list[dict], int]:
    """The rows of one shard in input order, its skipped documents, and the tokens it embedded: a document longer
    than ``long_tokens`` in pieces where the model allows it (bounded memory; dense outputs alone), the others whole
    in batches, every output from one forward."""
    from avey_b.apps.embed.streamed import Pieces

    late = settings.chunking == "late"
    work, skipped = prepare_shard(encoder, docs, settings)
    found: dict[str, list] = {o: [None] * len(work) for o in settings.outputs}
    pieces = Pieces(encoder, settings, long_tokens)  # takes none with other outputs than dense (its why_not)
    for i, (_, ids, ranges) in enumerate(work):
        if pieces.takes(len(ids)) and (done := pieces.encode(ids, ranges)) is not None:
            found["dense"][i] = done[0]
    whole = [i for i in range(len(work)) if found[settings.outputs[0]][i] is None]
    computed = embed_whole(encoder, [work[i] for i in whole], late, max_batch_tokens, settings.outputs)
    for kind, values in computed.items():
        for i, v in zip(whole, values, strict=True):
            found[kind][i] = v
    rows = shard_rows(work, found, late)
    return rows, skipped, sum(len(ids) for _, ids, _ in work)


def run_shard(encoder: Encoder, k: int, group: list[Document], out: Path, settings: Settings,
              max_batch_tokens: int, kept_schema=None, long_tokens: int = LONG_DOCUMENT_TOKENS) -> dict:
    """Embed shard ``k`` (documents ``group``), write it atomically, and return what its metadata records;
    ``kept_schema``: the Arrow types of the kept columns (:func:`avey_b.apps.embed.shards.infer_types`), the same for
    every shard."""
    rows, skipped, tokens = embed_shard(encoder, group, settings, max_batch_tokens, long_tokens)
    info = {"shard": k, "documents": len(group), "first_id": group[0].id, "last_id": group[-1].id,
            "rows": len(rows), "tokens": tokens, "skipped": skipped}
    dims = {"dense": encoder.config.hidden_size, "multivector": getattr(encoder.config, "multivector_dim", None)}
    table = shards.table_of(rows, settings, dims, info, kept_schema)
    shards.write_shard(out / shards.SHARD.format(k), table)  # through the module: the tests interrupt it there
    return info
