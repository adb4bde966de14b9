"""``avey-b embed MODEL INPUT OUTPUT``: embed a corpus into Parquet shards, resumably — one vector per document, or
one per chunk with late chunking.

    avey-b embed runs/quickstart/model corpus/ vectors/
    avey-b embed MODEL docs.jsonl vectors/ --id-column doc_id --chunking late --chunk-tokens 256
    python -c "import pyarrow.parquet as pq; print(pq.read_table('vectors').to_pandas())"

Input: a ``.txt`` file (one document, or one per non-blank line with ``--lines``), a ``.jsonl`` or ``.parquet``
file (the ``--text-column``), a directory of such files (searched recursively, in sorted order), or ``hf:NAME``
(a Hugging Face dataset, streamed; ``--hf-config``, ``--hf-split``). Ids come from ``--id-column``, or are made
up from where each document was read: ``<file>:<line>`` (JSON lines, and text with ``--lines``; lines count from
1), ``<file>:<row>`` (Parquet; rows count from 0), ``<file>`` (a whole text file) and ``<split>:<row>`` (``hf:``),
where ``<file>`` is the path relative to a directory INPUT, or the file's name.

Output: OUTPUT holds ``part-00000.parquet``, ... — ``--shard-size`` documents each, in input order; columns
``id``, ``n_tokens``, ``vector`` (``--dtype`` float32 or float16), and with late chunking one row per chunk with
``chunk``, ``char_start``, ``char_end`` (``n_tokens`` is then the chunk's) — and ``_manifest.json``: the model
and the SHA-256 of its files, every setting, counts, run times, and every skipped document with its length
(``pyarrow.parquet.read_table(OUTPUT)`` reads the shards; names starting with ``_`` or ``.`` are not data).

Resume: each shard is written atomically (a hidden temporary file, then a rename), so a killed job loses at most
the shard in flight; the same command again skips the finished shards. Run with other settings (model or
tokenizer files, input contents, columns, chunking, dtype, shard size, ``--max-tokens``, precision) into the same
OUTPUT, it stops with an error that names each difference: vectors of two settings never share a directory.

Batching: each shard's documents are sorted by length and cut into batches of at most ``--max-batch-tokens``
padded tokens (``avey-b serve``'s rule, :mod:`avey_b.utils.batching`). A document is never cut: one longer than
``--max-tokens`` (default: what memory allows, as ``avey-b serve`` computes it) is skipped and listed in the
manifest with its length. Precision follows the library's policy (bf16 autocast where the device multiplies bf16
natively, float32 elsewhere; ``--precision``).

Vectors: every Avey-B checkpoint embeds (an embedding model, a masked-LM, a bare backbone): the masked mean of
the backbone's last hidden state over the document's tokens, L2-normalized when the checkpoint's config says
``normalize_embeddings`` (True by default) — exactly ``AveyBForSentenceEmbedding``'s ``pooler_output``, and what
``avey-b serve`` answers. Late chunking (``--chunking late``): one forward over the whole document, then one
vector per chunk, the mean of the chunk's token states normalized the same way
(:meth:`avey_b.AveyBForSentenceEmbedding.encode_chunks`); chunks are ``--chunk-tokens`` consecutive text tokens
(special tokens such as [CLS] belong to no chunk), or the character spans of ``--chunk-spans-column`` (a list of
``[start, end)`` pairs per document; a span takes the tokens that start inside it).

Ray (``--backend ray``, ``pip install 'avey-b[ray]'``): the same job as a Ray Data pipeline on a cluster
(``--ray-address auto``, or an address) or a local Ray: this process reads the input in order, in waves of
``ray_wave`` (default 8) shards per actor; ``map_batches`` hands each shard to one of ``--concurrency``
actors that load the model once (``--num-gpus`` each; default 1 where the cluster has GPUs) and write the shard
into OUTPUT, which must be a filesystem every node sees (and ``avey_b`` installed on every node). Same layout,
manifest, resume and vectors as the default backend, which never imports Ray.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from avey_b.utils.batching import (
    BYTES_PER_TOKEN_PER_WIDTH,
    default_max_tokens,
    pad_right,
    token_budget_batches,
)
from avey_b.utils.cluster import BACKENDS, check_backend, cluster_gpus, start_ray

MANIFEST = "_manifest.json"
SHARD = "part-{:05d}.parquet"
FORMAT = "avey-b embed 1"
METADATA_KEY = b"avey_b.apps.embed"
POOLING = ("masked mean of the backbone's last hidden state over the document's tokens (per chunk: over the "
           "chunk's tokens, from one forward over the whole document), L2-normalized when the config's "
           "normalize_embeddings is true")
MODEL_FILES = ("config.json", "*.safetensors", "pytorch_model*.bin")
TOKENIZER_FILES = ("tokenizer*.json", "special_tokens_map.json", "vocab.*", "merges.txt", "*.model")
CHUNKINGS = ("none", "late")
VECTOR_DTYPES = ("float32", "float16")
#: The Ray backend's default wave: shards per actor read at once (the driver holds one wave's text); each wave is
#: one Ray Data pipeline, its actors loading the model once. ``embed_corpus(..., ray_wave=)`` sets it per job.
RAY_WAVE = 8


@dataclass
class Document:
    id: str
    text: str
    where: str
    """Where it was read (``file:line``), for messages."""
    spans: list[tuple[int, int]] | None = None
    """Character spans of its chunks (``--chunk-spans-column``)."""


# --------------------------------------------------------------------------------------------------- reading
def _text_files(source: str) -> tuple[Path, list[Path]]:
    from avey_b.data.corpus import resolve_files

    if not Path(source).exists():
        raise FileNotFoundError(f"input not found: {source!r} (give a file, a directory or hf:NAME)")
    return Path(source), resolve_files([source])


def _check_columns(files: Sequence[Path], id_column: str | None, spans_column: str | None) -> None:
    from avey_b.data.corpus import TEXT_SUFFIXES

    for f in files:
        if f.suffix.lower() in TEXT_SUFFIXES and (id_column or spans_column):
            flag = "--id-column" if id_column else "--chunk-spans-column"
            raise ValueError(f"{f}: a text file has no columns, so {flag} cannot apply to it (use .jsonl, .parquet "
                             "or hf: input)")


def _field(row: dict, column: str, where: str, kind: str):
    if column not in row:
        raise KeyError(f"{where}: no {kind} column {column!r} (columns: {sorted(row)})")
    value = row[column]
    if value is None:
        raise ValueError(f"{where}: the {kind} column {column!r} is empty (null)")
    return value


def _spans(value, text: str, where: str, column: str) -> list[tuple[int, int]]:
    try:
        spans = [tuple(pair) for pair in value]
        ok = all(len(s) == 2 and all(type(x) is int for x in s) and 0 <= s[0] < s[1] <= len(text) for s in spans)
    except TypeError:
        ok = False
    if not ok:
        raise ValueError(f"{where}: {column!r} must be a list of [start, end] character spans with 0 <= start < end "
                         f"<= {len(text)} (the text's length), got {str(value)[:200]}")
    return spans


def _document(row: dict, where: str, default_id: str, text_column: str, id_column: str | None,
              spans_column: str | None) -> Document:
    text = _field(row, text_column, where, "text")
    if not isinstance(text, str):
        raise ValueError(f"{where}: the text column {text_column!r} holds a {type(text).__name__}, not a string")
    doc_id = str(_field(row, id_column, where, "id")) if id_column else default_id
    spans = _spans(_field(row, spans_column, where, "chunk spans"), text, where, spans_column) if spans_column else None
    return Document(doc_id, text, where, spans)


def read_documents(source: str, *, lines: bool = False, text_column: str = "text", id_column: str | None = None,
                   spans_column: str | None = None, hf_config: str | None = None, hf_split: str = "train"
                   ) -> Iterator[Document]:
    """The documents of ``source`` in order, with their ids (see the module docstring for the formats and the
    made-up ids). Text is strict UTF-8 and a bad row is an error naming the file and line (:mod:`avey_b.utils.files`)."""
    from avey_b.data.corpus import JSONL_SUFFIXES, TEXT_SUFFIXES, open_hf_stream
    from avey_b.utils.files import iter_jsonl, iter_lines, read_text

    if source.startswith("hf:"):
        name = source[3:]
        for i, row in enumerate(open_hf_stream(name, hf_config, hf_split)):
            yield _document(row, f"{source} ({hf_split}) row {i}", f"{hf_split}:{i}", text_column, id_column,
                            spans_column)
        return
    root, files = _text_files(source)
    _check_columns(files, id_column, spans_column)
    for f in files:
        name = f.relative_to(root).as_posix() if root.is_dir() else f.name
        suffix = f.suffix.lower()
        if suffix in TEXT_SUFFIXES and lines:
            for lineno, line in iter_lines(f):
                if line.strip():
                    yield Document(f"{name}:{lineno}", line, f"{f}, line {lineno}")
        elif suffix in TEXT_SUFFIXES:
            yield Document(name, read_text(f), str(f))
        elif suffix in JSONL_SUFFIXES:
            for lineno, row in iter_jsonl(f):
                yield _document(row, f"{f}, line {lineno}", f"{name}:{lineno}", text_column, id_column, spans_column)
        else:
            import pyarrow.parquet as pq

            pf = pq.ParquetFile(f)
            columns = [c for c in (text_column, id_column, spans_column) if c]
            missing = [c for c in columns if c not in pf.schema_arrow.names]
            if missing:
                raise KeyError(f"{f}: no column {missing[0]!r} (columns: {pf.schema_arrow.names})")
            row_index = 0
            for batch in pf.iter_batches(columns=list(dict.fromkeys(columns)), batch_size=1024):
                for row in batch.to_pylist():
                    yield _document(row, f"{f}, row {row_index}", f"{name}:{row_index}", text_column, id_column,
                                    spans_column)
                    row_index += 1


def count_documents(source: str, *, lines: bool = False) -> int | None:
    """How many documents :func:`read_documents` will yield, counted cheaply (Parquet footers, lines; no parsing),
    for the progress ETA; None for ``hf:`` sources."""
    from avey_b.data.corpus import JSONL_SUFFIXES, TEXT_SUFFIXES
    from avey_b.utils.files import iter_lines

    if source.startswith("hf:"):
        return None
    total = 0
    for f in _text_files(source)[1]:
        suffix = f.suffix.lower()
        if suffix in TEXT_SUFFIXES and not lines:
            total += 1
        elif suffix in TEXT_SUFFIXES or suffix in JSONL_SUFFIXES:
            total += sum(1 for _, line in iter_lines(f) if line.strip())
        else:
            import pyarrow.parquet as pq

            total += pq.ParquetFile(f).metadata.num_rows
    return total


# -------------------------------------------------------------------------------------------------- chunking
def chunk_ranges(offsets: Sequence[tuple[int, int]], special: Sequence[int], *, chunk_tokens: int | None = None,
                 char_spans: Sequence[tuple[int, int]] | None = None) -> list[tuple[int, int, int, int]]:
    """The chunks of one tokenized document as ``(token start, token end, char start, char end)``, ends exclusive,
    token positions counted over the document's tokens (what :func:`avey_b.model.heads.chunk_embeddings` takes).

    ``offsets`` are the tokenizer's character offsets (Python string indices, i.e. Unicode code points) and ``special`` its special-tokens mask (1 for [CLS]...,
    which belong to no chunk). Either ``chunk_tokens`` consecutive text tokens per chunk (the last may be
    shorter; its character span runs from its first token's start to its last token's end), or ``char_spans``:
    each span takes the text tokens whose first character lies in it, and keeps its own characters. A span with
    no token is a ``ValueError``."""
    text_tokens = [i for i, s in enumerate(special) if not s]
    if chunk_tokens is not None:
        out = []
        for start in range(0, len(text_tokens), chunk_tokens):
            first, last = text_tokens[start], text_tokens[min(start + chunk_tokens, len(text_tokens)) - 1]
            out.append((first, last + 1, offsets[first][0], offsets[last][1]))
        return out
    out = []
    for a, b in char_spans or ():
        inside = [i for i in text_tokens if a <= offsets[i][0] < b]
        if not inside:
            raise ValueError(f"the chunk span [{a}, {b}) holds no token")
        out.append((inside[0], inside[-1] + 1, a, b))
    return out


# -------------------------------------------------------------------------------------------------- the model
def local_model_dir(model: str) -> Path:
    """``model`` as a local directory: itself, or a Hub id's config, weights and tokenizer files downloaded."""
    if Path(model).is_dir():
        return Path(model)
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(model, allow_patterns=["*.json", "*.safetensors", "*.txt", "*.model"]))


def file_hashes(directory: Path, patterns: Sequence[str]) -> dict[str, str]:
    """SHA-256 of each file of ``directory`` matching ``patterns`` (name -> hex)."""
    from avey_b.utils.files import sha256_of_file

    names = sorted({p.name for pattern in patterns for p in directory.glob(pattern) if p.is_file()})
    return {name: sha256_of_file(directory / name) for name in names}


class Embedder:
    """A saved Avey-B (any head, or the bare backbone) and its tokenizer, loaded once, turning tokenized documents
    into vectors in token-budget batches: one per document, or one per chunk (late chunking)."""

    def __init__(self, model_dir: str | os.PathLike, *, device: str = "auto", precision: str = "auto"):
        from transformers import AutoConfig, AutoTokenizer

        from avey_b.utils.device import pick_device, use_bf16

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
        import avey_b

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
        from avey_b.utils.device import autocast

        batch, mask = pad_right(ids, self.tokenizer.pad_token_id)
        batch, mask = batch.to(self.device), mask.to(self.device)
        self.forwards += 1
        with autocast(self.device, self.bf16):
            return self.backbone(input_ids=batch, attention_mask=mask).last_hidden_state, mask

    def embed(self, ids: list[list[int]], chunks: list[list[tuple[int, int]]] | None, max_batch_tokens: int
              ) -> list[torch.Tensor]:
        """Float32 vectors on the CPU: ``(d,)`` per document, or ``(n_chunks, d)`` with ``chunks`` (token ranges
        per document), in the order of ``ids``."""
        from avey_b.model.heads import chunk_embeddings, sentence_embedding

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


# ----------------------------------------------------------------------------------------------------- shards
def _write_shard(path: Path, table) -> None:
    """Write one shard atomically (the test of resuming interrupts the job here)."""
    import pyarrow.parquet as pq

    from avey_b.utils.records import write_bytes_atomic

    write_bytes_atomic(path, lambda f: pq.write_table(table, f))


def _shard_info(path: Path) -> dict:
    import pyarrow.parquet as pq

    return json.loads(pq.read_schema(path).metadata[METADATA_KEY])


def _table(rows: list[dict], late: bool, dim: int, dtype: str, info: dict):
    import numpy as np
    import pyarrow as pa

    vectors = np.stack([r["vector"] for r in rows]) if rows else np.zeros((0, dim))
    flat = pa.array(vectors.astype(dtype).reshape(-1))
    columns = {"id": pa.array([r["id"] for r in rows], pa.string())}
    if late:
        columns["chunk"] = pa.array([r["chunk"] for r in rows], pa.int32())
        columns["char_start"] = pa.array([r["char_start"] for r in rows], pa.int64())
        columns["char_end"] = pa.array([r["char_end"] for r in rows], pa.int64())
    columns["n_tokens"] = pa.array([r["n_tokens"] for r in rows], pa.int32())
    columns["vector"] = pa.FixedSizeListArray.from_arrays(flat, dim)
    table = pa.table(columns)
    return table.replace_schema_metadata({METADATA_KEY: json.dumps(info).encode()})


def _embed_shard(embedder: Embedder, docs: list[Document], settings: dict, max_batch_tokens: int
                 ) -> tuple[list[dict], list[dict], int]:
    """The rows of one shard in input order, its skipped documents, and the tokens it embedded."""
    late = settings["chunking"] == "late"
    enc = embedder.tokenize([d.text for d in docs], offsets=late)
    work, skipped = [], []
    for i, doc in enumerate(docs):
        ids = enc["input_ids"][i]
        if len(ids) > settings["max_tokens"]:
            skipped.append({"id": doc.id, "n_tokens": len(ids),
                            "reason": f"longer than max_tokens ({settings['max_tokens']:,}); never cut"})
            continue
        ranges = None
        if late:
            try:
                ranges = chunk_ranges(enc["offset_mapping"][i], enc["special_tokens_mask"][i],
                                      chunk_tokens=settings["chunk_tokens"], char_spans=doc.spans)
            except ValueError as error:
                raise ValueError(f"{doc.where}: {error}") from None
            if not ranges:
                skipped.append({"id": doc.id, "n_tokens": len(ids), "reason": "no text tokens to chunk"})
                continue
        work.append((doc, ids, ranges))
    chunks = [[r[:2] for r in ranges] for _, _, ranges in work] if late else None
    vectors = embedder.embed([ids for _, ids, _ in work], chunks, max_batch_tokens)
    rows = []
    for (doc, ids, ranges), v in zip(work, vectors, strict=True):
        if not late:
            rows.append({"id": doc.id, "n_tokens": len(ids), "vector": v.numpy()})
            continue
        for c, (t0, t1, c0, c1) in enumerate(ranges):
            rows.append({"id": doc.id, "chunk": c, "char_start": c0, "char_end": c1, "n_tokens": t1 - t0,
                         "vector": v[c].numpy()})
    return rows, skipped, sum(len(ids) for _, ids, _ in work)


def run_shard(embedder: Embedder, k: int, group: list[Document], out: Path, settings: dict, max_batch_tokens: int
              ) -> dict:
    """Embed shard ``k`` (documents ``group``), write it atomically, and return what its metadata records."""
    rows, skipped, tokens = _embed_shard(embedder, group, settings, max_batch_tokens)
    info = {"shard": k, "documents": len(group), "first_id": group[0].id, "last_id": group[-1].id,
            "rows": len(rows), "tokens": tokens, "skipped": skipped}
    table = _table(rows, settings["chunking"] == "late", embedder.config.hidden_size, settings["dtype"], info)
    _write_shard(out / SHARD.format(k), table)
    return info


# -------------------------------------------------------------------------------------------------------- Ray
class RayShardWriter:
    """A Ray Data actor (``map_batches``, one shard a batch): loads the model once, then embeds and writes whole
    shards with :func:`run_shard`, as the local backend does, into OUTPUT (a filesystem every node sees)."""

    def __init__(self, model_dir: str, out: str, settings: dict, max_batch_tokens: int, device: str):
        self.embedder = Embedder(model_dir, device=device, precision=settings["precision"])
        self.out, self.settings, self.max_batch_tokens = Path(out), settings, max_batch_tokens

    def __call__(self, batch: dict) -> dict:
        infos = []
        for k, docs in zip(batch["shard"], batch["docs"], strict=True):
            group = [Document(**d) for d in json.loads(docs)]
            info = run_shard(self.embedder, int(k), group, self.out, self.settings, self.max_batch_tokens)
            infos.append(json.dumps(info))
        return {"info": infos}


def _start_ray(address: str | None, num_gpus: float | None, device: str, cleanup: contextlib.ExitStack) -> dict:
    """Connect to the cluster at ``address`` or start a local Ray (:func:`avey_b.utils.cluster.start_ray`); the GPUs per
    actor (default: 1 where the cluster has GPUs) and the actors' device."""
    ray = start_ray(address, cleanup, data=True)
    if num_gpus is None:
        num_gpus = 1 if cluster_gpus(ray) >= 1 else 0
    if device == "auto":
        device = "cuda" if num_gpus else "cpu"
    return {"num_gpus": num_gpus, "device": device}


def _run_on_ray(pending: list[tuple[int, list[Document]]], model_dir: Path, out: Path, settings: dict,
                max_batch_tokens: int, device: str, concurrency: int, num_gpus: float) -> Iterator[dict]:
    """Run pending shards (a wave: ``ray_wave`` per actor) as a Ray Data pipeline — the shards' documents, read in order by the driver →
    ``map_batches`` over ``concurrency`` :class:`RayShardWriter` actors (the model loaded once per actor,
    ``num_gpus`` each) → one Parquet shard each, written by the actor — and yield each shard's metadata as it
    finishes. The actors write the shards themselves (not ``Dataset.write_parquet``, whose files are named by
    Ray's blocks) so that OUTPUT is laid out, and resumes, exactly as with the local backend."""
    import dataclasses

    import ray

    ray.data.DataContext.get_current().enable_progress_bars = False  # the job's own progress line reports
    items = [{"shard": k, "docs": json.dumps([dataclasses.asdict(d) for d in group])} for k, group in pending]
    results = ray.data.from_items(items).map_batches(
        RayShardWriter, batch_size=1, concurrency=concurrency, num_gpus=num_gpus, num_cpus=0 if num_gpus else 1,
        fn_constructor_kwargs={"model_dir": str(model_dir), "out": str(out), "settings": settings,
                               "max_batch_tokens": max_batch_tokens, "device": device})
    for row in results.iter_rows():
        yield json.loads(row["info"])


# ------------------------------------------------------------------------------------------------------- job
def _differences(then: dict, now: dict) -> list[str]:
    short = lambda v: {k: h[:12] for k, h in v.items()} if isinstance(v, dict) else v
    return [f"{k}: {short(then.get(k))!r} then, {short(now.get(k))!r} now" for k in sorted(set(then) | set(now))
            if then.get(k) != now.get(k)]


def _check_arguments(source: str, *, id_column: str | None, chunking: str, chunk_tokens: int | None,
                     chunk_spans_column: str | None, dtype: str, backend: str, ray_address: str | None,
                     concurrency: int, num_gpus: float | None, sizes: dict[str, int | None]) -> None:
    """Refuse bad arguments before anything is read or written: pyarrow missing, options of another backend or
    chunking, a size below 1 (``sizes``: name → value, in the order they are checked), or a column a file lacks."""
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise ImportError("avey-b embed writes Parquet with pyarrow: pip install 'avey-b[embed]'") from None
    check_backend(backend, {"--ray-address": ray_address is not None, "--concurrency": concurrency != 1,
                            "--num-gpus": num_gpus is not None})
    if chunking not in CHUNKINGS:
        raise ValueError(f"chunking must be one of {CHUNKINGS}, got {chunking!r}")
    if chunking == "late" and (chunk_tokens is None) == (chunk_spans_column is None):
        raise ValueError("--chunking late needs exactly one of --chunk-tokens N or --chunk-spans-column COL")
    if chunking == "none" and (chunk_tokens is not None or chunk_spans_column is not None):
        raise ValueError("--chunk-tokens and --chunk-spans-column apply with --chunking late")
    if chunk_tokens is not None and chunk_tokens < 1:
        raise ValueError(f"--chunk-tokens must be at least 1, got {chunk_tokens}")
    if dtype not in VECTOR_DTYPES:
        raise ValueError(f"dtype must be one of {VECTOR_DTYPES}, got {dtype!r}")
    for name, value in sizes.items():
        if value is not None and value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}")
    if not source.startswith("hf:"):
        _check_columns(_text_files(source)[1], id_column, chunk_spans_column)


def _previous_manifest(out: Path) -> dict | None:
    """The manifest of the run to resume in ``out`` (None: a new or empty directory, or one with no shard yet);
    refuses a directory that is not an ``avey-b embed`` output."""
    from avey_b.utils.files import load_json

    previous = load_json(out / MANIFEST) if (out / MANIFEST).exists() else None
    if previous is None and out.exists() and any(p for p in out.iterdir() if not p.name.startswith(".")):
        raise ValueError(f"{out} is not empty and holds no {MANIFEST}: it is not an avey-b embed output; give a new "
                         "or empty directory")
    if previous is not None and previous.get("format") != FORMAT:
        raise ValueError(f"{out / MANIFEST} is not an {FORMAT!r} manifest (format {previous.get('format')!r})")
    if previous is not None and not any(out.glob("part-*.parquet")):
        previous = None  # no shard written yet (e.g. the first run stopped at a bad row): nothing to mix with
    return previous


def _settings(embedder: Embedder, source: str, previous: dict | None, *, lines: bool, text_column: str,
              id_column: str | None, hf_config: str | None, hf_split: str, chunking: str, chunk_tokens: int | None,
              chunk_spans_column: str | None, dtype: str, shard_size: int, max_tokens: int | None) -> dict:
    """What the vectors depend on (the model's and tokenizer's files, the input, every setting): a rerun into the
    same OUTPUT must match them."""
    from avey_b.utils.files import content_hash

    hf = source.startswith("hf:")
    if max_tokens is None:  # what memory allows; on a rerun, what the first run used (memory differs run to run)
        max_tokens = (previous or {}).get("settings", {}).get("max_tokens") or default_max_tokens(
            embedder.config.hidden_size)
    return {
        "model_sha256": file_hashes(embedder.model_dir, MODEL_FILES),
        "tokenizer_sha256": file_hashes(embedder.model_dir, TOKENIZER_FILES),
        "input_sha256": None if hf else content_hash(source),
        "hf_dataset": {"name": source[3:], "config": hf_config, "split": hf_split} if hf else None,
        "lines": lines, "text_column": text_column, "id_column": id_column, "chunking": chunking,
        "chunk_tokens": chunk_tokens, "chunk_spans_column": chunk_spans_column, "dtype": dtype,
        "shard_size": shard_size, "max_tokens": max_tokens, "precision": "bf16" if embedder.bf16 else "fp32",
    }


def _check_rerun(out: Path, previous: dict | None, settings: dict) -> None:
    """Refuse to add vectors of other settings to ``out``, naming each difference."""
    if previous is not None:
        diff = _differences(previous["settings"], settings)
        if diff:
            raise ValueError(f"{out} holds vectors made with other settings — " + "; ".join(diff) + ". Give another "
                             "output directory, or rerun with the settings it was made with")


def _start_manifest(out: Path, model: str, source: str, embedder: Embedder, settings: dict, previous: dict | None,
                    run: dict, id_column: str | None, hf_split: str) -> dict:
    """Make ``out``, clear what a killed run left in flight, and write the manifest of a running job (``run``
    appended to the earlier runs); return it."""
    from avey_b.utils.records import TMP_SUFFIX, write_json_atomic

    out.mkdir(parents=True, exist_ok=True)
    for pattern in (".part-*", f".{MANIFEST}.*"):  # a shard, or the manifest, in flight when a run was killed
        for stale in out.glob(pattern + TMP_SUFFIX):
            stale.unlink()
    hf = source.startswith("hf:")
    manifest = {
        "format": FORMAT, "status": "running",
        "model": {"path": str(model), "architecture": embedder.architecture, "pooling": POOLING,
                  "normalize_embeddings": bool(getattr(embedder.config, "normalize_embeddings", True)),
                  "dim": embedder.config.hidden_size},
        "input": {"source": str(source), "ids": f"column {id_column!r}" if id_column else (
            f"made up: {hf_split}:<row>" if hf else "made up: <file>:<line> (.jsonl; .txt with --lines), "
            "<file>:<row> (.parquet, from 0), <file> (a whole .txt), <file> relative to the input directory")},
        "settings": settings, "runs": [*(previous or {}).get("runs", []), run],
    }
    write_json_atomic(out / MANIFEST, manifest)
    return manifest


def _check_new_ids(group: list[Document], seen: dict[str, str]) -> None:
    """Refuse an id met before (``seen``: id → where it was read), and record ``group``'s."""
    for d in group:
        if d.id in seen:
            raise ValueError(f"{d.where}: duplicate id {d.id!r} (first at {seen[d.id]})")
        seen[d.id] = d.where


def _found_shard(path: Path, group: list[Document]) -> dict:
    """The metadata of shard ``path``, written by an earlier run; refused unless it holds ``group``'s documents."""
    info = _shard_info(path)
    if (info["documents"], info["first_id"], info["last_id"]) != (len(group), group[0].id, group[-1].id):
        raise ValueError(f"{path} was written from other documents (ids {info['first_id']!r}..."
                         f"{info['last_id']!r}, {info['documents']}) than the input's "
                         f"{group[0].id!r}...{group[-1].id!r} ({len(group)})")
    return info


def _embed_shards(docs: Iterator[Document], out: Path, embedder: Embedder, settings: dict, manifest: dict,
                  run: dict, bar, started: float, *, backend: str, max_batch_tokens: int, ray_setup: dict | None,
                  concurrency: int, ray_wave: int) -> tuple[dict[int, dict], dict[str, str]]:
    """Cut ``docs`` into shards of ``settings["shard_size"]`` and embed those not written yet — here, or on Ray in
    waves of ``ray_wave * concurrency`` shards — recording each written shard in the manifest; return every
    shard's metadata (by number) and every document's id (→ where it was read)."""
    from avey_b.utils.records import write_json_atomic

    seen, infos, pending, tokens = {}, {}, [], 0

    def written(info: dict) -> None:
        nonlocal tokens
        infos[info["shard"]] = info
        run["shards_written"] += 1
        write_json_atomic(out / MANIFEST, manifest)  # the run's record says how far it got
        tokens += info["tokens"]
        elapsed = time.monotonic() - started
        bar.update(info["documents"], **{"tokens/s": tokens / elapsed if elapsed > 0 else 0.0})

    def flush() -> None:  # the Ray backend's shards read so far: one Ray Data pipeline
        if not pending:
            return
        for info in _run_on_ray(pending, embedder.model_dir, out, settings, max_batch_tokens,
                                ray_setup["device"], concurrency, ray_setup["num_gpus"]):
            written(info)
        pending.clear()

    for k in itertools.count():
        group = list(itertools.islice(docs, settings["shard_size"]))
        if not group:
            break
        _check_new_ids(group, seen)
        path = out / SHARD.format(k)
        if path.exists():
            infos[k] = _found_shard(path, group)
            run["shards_found"] += 1
        elif backend == "local":
            written(run_shard(embedder, k, group, out, settings, max_batch_tokens))
        else:
            pending.append((k, group))
        if len(pending) == ray_wave * concurrency:
            flush()
    flush()
    return infos, seen


def _finish_manifest(out: Path, source: str, manifest: dict, run: dict, infos: dict[int, dict],
                     seen: dict[str, str], started: float) -> None:
    """Mark the manifest complete, with the counts, the shards and the skipped documents, and write it."""
    from avey_b.utils.records import utc_timestamp, write_json_atomic

    if not infos:
        raise ValueError(f"{source} holds no documents")
    shards = [{"file": SHARD.format(k), **{key: infos[k][key] for key in ("documents", "rows", "tokens")}}
              for k in sorted(infos)]
    skipped = [s for k in sorted(infos) for s in infos[k]["skipped"]]
    run.update(finished=utc_timestamp(), seconds=round(time.monotonic() - started, 3))
    manifest.update(status="complete", counts={
        "documents": len(seen), "embedded": len(seen) - len(skipped), "skipped": len(skipped),
        "rows": sum(s["rows"] for s in shards), "tokens": sum(s["tokens"] for s in shards), "shards": len(shards),
        "seconds": round(sum(r.get("seconds", 0.0) for r in manifest["runs"]), 3)},
        shards=shards, skipped=skipped)
    write_json_atomic(out / MANIFEST, manifest)


def embed_corpus(model: str, source: str, output: str | os.PathLike, *, lines: bool = False,
                 text_column: str = "text", id_column: str | None = None, hf_config: str | None = None,
                 hf_split: str = "train", chunking: str = "none", chunk_tokens: int | None = None,
                 chunk_spans_column: str | None = None, dtype: str = "float32", shard_size: int = 1000,
                 max_tokens: int | None = None, max_batch_tokens: int = 32_768, device: str = "auto",
                 precision: str = "auto", progress: bool = True, backend: str = "local",
                 ray_address: str | None = None, concurrency: int = 1, num_gpus: float | None = None,
                 ray_wave: int = RAY_WAVE) -> dict:
    """Embed the documents of ``source`` into Parquet shards under ``output`` and return the manifest; rerun with
    the same settings, finish what a killed run left. The arguments are those of ``avey-b embed`` (module
    docstring); ``ray_wave``, shards per actor in one Ray pipeline, changes memory and scheduling, not the output."""
    from avey_b.utils.device import pick_device, use_bf16
    from avey_b.utils.progress import Progress
    from avey_b.utils.records import utc_timestamp

    _check_arguments(source, id_column=id_column, chunking=chunking, chunk_tokens=chunk_tokens,
                     chunk_spans_column=chunk_spans_column, dtype=dtype, backend=backend, ray_address=ray_address,
                     concurrency=concurrency, num_gpus=num_gpus,
                     sizes={"shard_size": shard_size, "max_batch_tokens": max_batch_tokens, "max_tokens": max_tokens,
                            "concurrency": concurrency, "ray_wave": ray_wave})
    out = Path(output)
    previous = _previous_manifest(out)

    with contextlib.ExitStack() as cleanup:  # a Ray started here is shut down however the job ends
        model_dir = local_model_dir(model)
        ray_setup = _start_ray(ray_address, num_gpus, device, cleanup) if backend == "ray" else None
        target = torch.device(ray_setup["device"]) if ray_setup else pick_device(device)  # where the forwards run
        resolved = "bf16" if use_bf16(precision, target) else "fp32"
        embedder = Embedder(model_dir, device="cpu" if ray_setup else device, precision=resolved)
        settings = _settings(embedder, source, previous, lines=lines, text_column=text_column, id_column=id_column,
                             hf_config=hf_config, hf_split=hf_split, chunking=chunking, chunk_tokens=chunk_tokens,
                             chunk_spans_column=chunk_spans_column, dtype=dtype, shard_size=shard_size,
                             max_tokens=max_tokens)
        _check_rerun(out, previous, settings)
        run = {"started": utc_timestamp(), "device": str(target), "max_batch_tokens": max_batch_tokens,
               "backend": backend, "shards_found": 0, "shards_written": 0}
        if ray_setup:
            run.update(ray_address=ray_address, concurrency=concurrency, num_gpus=ray_setup["num_gpus"])
        manifest = _start_manifest(out, model, source, embedder, settings, previous, run, id_column, hf_split)

        started = time.monotonic()
        total = count_documents(source, lines=lines)
        done = sum(_shard_info(p)["documents"] for p in out.glob("part-*.parquet"))
        docs = read_documents(source, lines=lines, text_column=text_column, id_column=id_column,
                              spans_column=chunk_spans_column, hf_config=hf_config, hf_split=hf_split)
        with Progress(total, f"embed {Path(source).name}", unit="doc", initial=done, enabled=progress) as bar:
            infos, seen = _embed_shards(docs, out, embedder, settings, manifest, run, bar, started, backend=backend,
                                        max_batch_tokens=max_batch_tokens, ray_setup=ray_setup,
                                        concurrency=concurrency, ray_wave=ray_wave)
        _finish_manifest(out, source, manifest, run, infos, seen, started)
        return manifest


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="avey-b embed", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("model", help="a saved Avey-B (local directory or Hub id) with its tokenizer")
    p.add_argument("input", help="a .txt/.jsonl/.parquet file, a directory of them, or hf:NAME")
    p.add_argument("output", help="the directory of Parquet shards and _manifest.json (new, or the one to resume)")
    p.add_argument("--lines", action="store_true", help=".txt: one document per non-blank line (default: per file)")
    p.add_argument("--text-column", default="text", help="the text field of .jsonl/.parquet/hf: rows (default text)")
    p.add_argument("--id-column", default=None, help="the id field (default: ids made up from file and line)")
    p.add_argument("--hf-config", default=None, help="hf: the dataset's configuration")
    p.add_argument("--hf-split", default="train", help="hf: the split (default train)")
    p.add_argument("--chunking", choices=CHUNKINGS, default="none",
                   help="late: one forward per document, one vector per chunk")
    p.add_argument("--chunk-tokens", type=int, default=None, help="late chunking: text tokens per chunk")
    p.add_argument("--chunk-spans-column", default=None,
                   help="late chunking: a column of [start, end) character spans per document")
    p.add_argument("--dtype", choices=VECTOR_DTYPES, default="float32", help="the stored vectors' type")
    p.add_argument("--shard-size", type=int, default=1000, help="documents per Parquet shard (default 1000)")
    p.add_argument("--max-tokens", type=int, default=None,
                   help="longest document embedded (longer: skipped and listed, never cut); default: half the "
                        f"available memory at {BYTES_PER_TOKEN_PER_WIDTH}·d bytes per token, as avey-b serve")
    p.add_argument("--max-batch-tokens", type=int, default=32_768,
                   help="padded tokens per batch (a single longer document runs alone)")
    p.add_argument("--device", default="auto")
    p.add_argument("--precision", choices=("auto", "bf16", "fp32"), default="auto")
    p.add_argument("--backend", choices=BACKENDS, default="local",
                   help="ray: the same job as a Ray Data pipeline of model-holding actors (pip install 'avey-b[ray]')")
    p.add_argument("--ray-address", default=None,
                   help="ray: the cluster to join (auto: the one this machine belongs to); default: a local Ray")
    p.add_argument("--concurrency", type=int, default=1, help="ray: actors, each holding the model (default 1)")
    p.add_argument("--num-gpus", type=float, default=None,
                   help="ray: GPUs per actor (default: 1 where the cluster has GPUs, else 0)")
    args = p.parse_args(argv)
    manifest = embed_corpus(args.model, args.input, args.output, lines=args.lines, text_column=args.text_column,
                            id_column=args.id_column, hf_config=args.hf_config, hf_split=args.hf_split,
                            chunking=args.chunking, chunk_tokens=args.chunk_tokens,
                            chunk_spans_column=args.chunk_spans_column, dtype=args.dtype, shard_size=args.shard_size,
                            max_tokens=args.max_tokens, max_batch_tokens=args.max_batch_tokens, device=args.device,
                            precision=args.precision, backend=args.backend, ray_address=args.ray_address,
                            concurrency=args.concurrency, num_gpus=args.num_gpus)
    counts, run = manifest["counts"], manifest["runs"][-1]
    print(f"embedded {counts['embedded']:,} of {counts['documents']:,} documents ({counts['rows']:,} vectors, "
          f"{counts['tokens']:,} tokens) into {args.output}: {run['shards_written']} shard(s) written, "
          f"{run['shards_found']} found done, {counts['skipped']} document(s) skipped (listed in "
          f"{Path(args.output) / MANIFEST})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
