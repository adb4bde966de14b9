"""The storage of ``avey-b embed``, its OUTPUT: the Parquet shards (each written atomically, with its metadata in the
file), the manifest (``_manifest.json``), resuming a killed run, and the check that refuses to mix vectors of other
settings. The rows come from :mod:`avey_b.apps.embed.embedder`. pyarrow (the ``embed`` extra) is imported where a
shard is written or read.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from avey_b.apps.embed.inputs import Document
from avey_b.inference.encoder import Encoder
from avey_b.utils.files import load_json
from avey_b.utils.records import TMP_SUFFIX, utc_timestamp, write_bytes_atomic, write_json_atomic

MANIFEST = "_manifest.json"
SHARD = "part-{:05d}.parquet"
FORMAT = "avey-b embed 1"
METADATA_KEY = b"avey_b.apps.embed"
POOLING = ("masked mean of the backbone's last hidden state over the document's tokens (per chunk: over the "
           "chunk's tokens, from one forward over the whole document), L2-normalized when the config's "
           "normalize_embeddings is true")


@dataclass(frozen=True)
class Settings:
    """What the vectors depend on — the model's and tokenizer's files, the input, the options that change a vector
    or the layout — recorded as the manifest's ``settings``; a rerun into the same OUTPUT must match them, field by
    field. Built by :func:`avey_b.apps.embed.job.record_settings` from the options; the shards read ``chunking``,
    ``chunk_tokens``, ``chunk_overlap``, ``max_tokens``, ``dtype``, ``keep_columns`` and ``with_text``. The fields
    after ``precision`` came after the first format: a manifest without them reads them as what that format did
    (:data:`FIRST_FORMAT`)."""

    model_sha256: dict[str, str] = field(default_factory=dict)
    """SHA-256 of the model's files (config, weights), by name."""
    tokenizer_sha256: dict[str, str] = field(default_factory=dict)
    input_sha256: str | None = None
    """Of the input file or directory; None for ``hf:`` input."""
    hf_dataset: dict | None = None
    """``hf:`` input: ``{"name", "config", "split"}``."""
    lines: bool = False
    text_column: str = "text"
    id_column: str | None = None
    chunking: str = "none"
    chunk_tokens: int | None = None
    chunk_spans_column: str | None = None
    dtype: str = "float32"
    shard_size: int | None = None
    """Documents per shard at most (None: no such cap)."""
    max_tokens: int | None = None
    """Resolved: the option, or what memory allowed the first run."""
    precision: str = "fp32"
    """Resolved: ``bf16`` or ``fp32``."""
    shard_tokens: int | None = None
    """Tokens per shard at most (None: no such cap; a longer document is a shard alone)."""
    chunk_overlap: int = 0
    keep_columns: list[str] = field(default_factory=list)
    with_text: bool = False
    outputs: list[str] = field(default_factory=lambda: ["dense"])
    """What each row stores (``--outputs``): ``dense`` (``vector``), ``sparse`` (``sparse_indices``,
    ``sparse_values``), ``multivector`` (token vectors, ``multivector``)."""

    @classmethod
    def from_json(cls, data: dict) -> Settings:
        """The settings of a manifest (a field it lacks reads as None, and is a difference; one added after the
        first format reads as that format's behaviour, :data:`FIRST_FORMAT`)."""
        return cls(**{f.name: data.get(f.name, FIRST_FORMAT.get(f.name)) for f in dataclasses.fields(cls)})

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    def differences(self, now: Settings) -> list[str]:
        """Each field that differs, by name: ``"dtype: 'float32' then, 'float16' now"`` (hashes shortened)."""
        short = lambda v: {k: h[:12] for k, h in v.items()} if isinstance(v, dict) else v  # noqa: E731
        names = sorted(f.name for f in dataclasses.fields(self))
        return [f"{k}: {short(getattr(self, k))!r} then, {short(getattr(now, k))!r} now" for k in names
                if getattr(self, k) != getattr(now, k)]


#: The settings recorded as the options give them (:class:`avey_b.apps.embed.options.EmbedOptions`' fields of these
#: names, tuples as lists); the others are the files' hashes, the input's name and the values resolved at the first
#: run (``shard_size``, ``max_tokens``, ``precision``, ``shard_tokens``).
RECORDED_OPTIONS = ("lines", "text_column", "id_column", "chunking", "chunk_tokens", "chunk_spans_column", "dtype",
                    "chunk_overlap", "keep_columns", "with_text", "outputs")
#: The settings added after the first format, with the values that give what that format did.
FIRST_FORMAT = {"shard_tokens": None, "chunk_overlap": 0, "keep_columns": [], "with_text": False,
                "outputs": ["dense"]}


# ------------------------------------------------------------------------------------------------ kept columns
def infer_types(docs: list[Document], columns: list[str], schema=None):
    """The Arrow schema of ``columns`` (``--keep-columns``) over ``docs``' values, as pyarrow infers them, unified
    with ``schema`` (the types so far: an int column with a float becomes double, a null one takes the other's type,
    structs gather their fields); values that fit no common type are an error naming the column and the row."""
    import pyarrow as pa

    def unify(schemas):
        return pa.unify_schemas([s for s in schemas if s is not None], promote_options="permissive")

    def of(rows):
        return pa.schema([pa.field(c, pa.array([d.kept[c] for d in rows]).type) for c in columns])

    try:
        return unify([schema, of(docs)])
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        for d in docs:  # find the first row that does not fit
            try:
                schema = unify([schema, of([d])])
            except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
                raise ValueError(f"{d.where}: a kept column's value fits no one type with the rows before it "
                                 f"({error}); --keep-columns stores each column with one type") from None
        raise


def parquet_types(path: Path, columns: list[str], schema=None):
    """The types of ``columns`` in the Parquet file ``path``, as stored there, unified with ``schema`` (the types
    so far, :func:`infer_types`)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    own = pq.read_schema(path)
    try:
        return pa.unify_schemas([s for s in (schema, pa.schema([own.field(c) for c in columns])) if s is not None],
                                promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
        raise ValueError(f"{path}: a kept column's type fits no one type with the files before it ({error}); "
                         "--keep-columns stores each column with one type") from None


def shard_schema(path: Path, columns: list[str]):
    """The types of the kept ``columns`` in a written shard."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    own = pq.read_schema(path)
    return pa.schema([own.field(c) for c in columns])


def _kept_array(docs: list[Document], repeats: list[int], column: str, typ):
    import pyarrow as pa

    values = [d.kept[column] for d, n in zip(docs, repeats, strict=True) for _ in range(n)]
    try:
        return pa.array(values, type=typ)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
        where = next((d.where for d in docs if not _fits(d.kept[column], typ)), docs[0].where if docs else "?")
        raise ValueError(f"{where}: the value of kept column {column!r} is not a {typ} like the rows before it "
                         f"({error})") from None


def _fits(value, typ) -> bool:
    import pyarrow as pa

    try:
        pa.array([value], type=typ)
        return True
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return False


# ------------------------------------------------------------------------------------------------------ shards
def write_shard(path: Path, table) -> None:
    """Write one shard atomically (the test of resuming interrupts the job here)."""
    import pyarrow.parquet as pq

    write_bytes_atomic(path, lambda f: pq.write_table(table, f))


def shard_info(path: Path) -> dict:
    """The metadata a shard carries: its number, documents, first and last ids, rows, tokens, skipped documents."""
    import pyarrow.parquet as pq

    return json.loads(pq.read_schema(path).metadata[METADATA_KEY])


def table_of(rows: list[dict], settings: Settings, dims: dict[str, int], info: dict, kept_schema):
    """The shard's table: ``id``, with late chunking ``chunk``, ``char_start``, ``char_end``, then ``n_tokens``,
    ``text`` (``--with-text``), the kept columns (typed by ``kept_schema``), ``vector`` (``dense``),
    ``sparse_indices`` (int32) and ``sparse_values`` (float32) lists (``sparse``) and ``multivector`` (a list of
    ``dims["multivector"]``-wide vectors per row). ``dims``: each output's width."""
    import pyarrow as pa

    columns = {"id": pa.array([r["id"] for r in rows], pa.string())}
    if settings.chunking == "late":
        columns["chunk"] = pa.array([r["chunk"] for r in rows], pa.int32())
        columns["char_start"] = pa.array([r["char_start"] for r in rows], pa.int64())
        columns["char_end"] = pa.array([r["char_end"] for r in rows], pa.int64())
    columns["n_tokens"] = pa.array([r["n_tokens"] for r in rows], pa.int32())
    if settings.with_text:
        columns["text"] = pa.array([r["text"] for r in rows], pa.string())
    if settings.keep_columns:
        docs, repeats = [], []  # each document once, with its rows (its chunks)
        for r in rows:
            if docs and docs[-1] is r["doc"]:
                repeats[-1] += 1
            else:
                docs.append(r["doc"])
                repeats.append(1)
        for c in settings.keep_columns:
            columns[c] = _kept_array(docs, repeats, c, kept_schema.field(c).type)
    if "dense" in settings.outputs:
        vectors = np.stack([r["vector"] for r in rows]) if rows else np.zeros((0, dims["dense"]))
        columns["vector"] = pa.FixedSizeListArray.from_arrays(pa.array(vectors.astype(settings.dtype).reshape(-1)),
                                                             dims["dense"])
    if "sparse" in settings.outputs:
        columns["sparse_indices"] = pa.array([r["sparse"][0].astype(np.int32) for r in rows], pa.list_(pa.int32()))
        columns["sparse_values"] = pa.array([r["sparse"][1].astype(np.float32) for r in rows],
                                            pa.list_(pa.float32()))
    if "multivector" in settings.outputs:
        columns["multivector"] = token_vector_column([r["multivector"] for r in rows], dims["multivector"],
                                                     settings.dtype)
    table = pa.table(columns)
    return table.replace_schema_metadata({METADATA_KEY: json.dumps(info).encode()})


def token_vector_column(vectors: list[np.ndarray], dim: int, dtype: str):
    """Each row's ``(n_i, dim)`` token vectors as one Arrow list of fixed-size lists (``list<fixed_size_list<dtype,
    dim>>``): ``table["multivector"][i]`` reads back as row ``i``'s ``n_i`` vectors."""
    import pyarrow as pa

    flat = np.concatenate([v.reshape(-1, dim) for v in vectors]) if vectors else np.zeros((0, dim))
    inner = pa.FixedSizeListArray.from_arrays(pa.array(flat.astype(dtype).reshape(-1)), dim)
    offsets = np.concatenate([[0], np.cumsum([len(v) for v in vectors])]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), inner)


def found_shard(path: Path, group: list[Document]) -> dict:
    """The metadata of shard ``path``, written by an earlier run; refused unless it holds ``group``'s documents."""
    info = shard_info(path)
    if (info["documents"], info["first_id"], info["last_id"]) != (len(group), group[0].id, group[-1].id):
        raise ValueError(f"{path} was written from other documents (ids {info['first_id']!r}..."
                         f"{info['last_id']!r}, {info['documents']}) than the input's "
                         f"{group[0].id!r}...{group[-1].id!r} ({len(group)})")
    return info


def documents_done(out: Path) -> int:
    """The documents of the shards already in ``out``."""
    return sum(shard_info(p)["documents"] for p in out.glob("part-*.parquet"))


# ---------------------------------------------------------------------------------------------------- manifest
def previous_manifest(out: Path) -> dict | None:
    """The manifest of the run to resume in ``out`` (None: a new or empty directory, or one with no shard yet);
    refuses a directory that is not an ``avey-b embed`` output."""
    previous = load_json(out / MANIFEST) if (out / MANIFEST).exists() else None
    if previous is None and out.exists() and any(p for p in out.iterdir() if not p.name.startswith(".")):
        raise ValueError(f"{out} is not empty and holds no {MANIFEST}: it is not an avey-b embed output; give a new "
                         "or empty directory")
    if previous is not None and previous.get("format") != FORMAT:
        raise ValueError(f"{out / MANIFEST} is not an {FORMAT!r} manifest (format {previous.get('format')!r})")
    if previous is not None and not any(out.glob("part-*.parquet")):
        previous = None  # no shard written yet (e.g. the first run stopped at a bad row): nothing to mix with
    return previous


def check_rerun(out: Path, previous: dict | None, settings: Settings, update: bool = False) -> None:
    """Refuse to add vectors of other settings to ``out``, naming each difference (``update``: but the input's)."""
    if previous is not None:
        diff = Settings.from_json(previous["settings"]).differences(settings)
        if update:
            diff = [d for d in diff if not d.startswith("input_sha256:")]
        if diff:
            hint = "" if update or len(diff) > 1 or not diff[0].startswith("input_sha256:") else (
                " (or --update: bring it to the new input, computing only what changed)")
            raise ValueError(f"{out} holds vectors made with other settings — " + "; ".join(diff) + ". Give another "
                             f"output directory, or rerun with the settings it was made with{hint}")


def start_manifest(out: Path, model: str, source: str, encoder: Encoder, settings: Settings,
                   previous: dict | None, run: dict) -> dict:
    """Make ``out``, clear what a killed run left in flight, and write the manifest of a running job (``run``
    appended to the earlier runs); return it."""
    out.mkdir(parents=True, exist_ok=True)
    for pattern in (".part-*", f".{MANIFEST}.*"):  # a shard, or the manifest, in flight when a run was killed
        for stale in out.glob(pattern + TMP_SUFFIX):
            stale.unlink()
    manifest = manifest_of(model, source, encoder, settings, previous, run)
    write_json_atomic(out / MANIFEST, manifest)
    return manifest


def manifest_of(model: str, source: str, encoder: Encoder, settings: Settings, previous: dict | None,
                run: dict) -> dict:
    """The manifest of a running job (``run`` appended to the earlier runs)."""
    if settings.id_column:
        ids = f"column {settings.id_column!r}"
    elif settings.hf_dataset:
        ids = f"column 'id' where the rows have one, else made up: {settings.hf_dataset['split']}:<row>"
    else:
        ids = ("column 'id' in the files whose rows have one, else made up: <file>:<line> (.jsonl; .txt with "
               "--lines), <file>:<row> (.parquet, from 0), <file> (a whole .txt), <file> relative to the input "
               "directory")
    return {
        "format": FORMAT, "status": "running",
        "model": {"path": str(model), "architecture": encoder.architecture, "pooling": POOLING,
                  "normalize_embeddings": encoder.normalize,
                  "dim": encoder.config.hidden_size},
        "input": {"source": str(source), "ids": ids},
        "settings": settings.to_json(), "runs": [*(previous or {}).get("runs", []), run],
    }


def finish_manifest(out: Path, source: str, manifest: dict, run: dict, infos: dict[int, dict], documents: int,
                    started: float) -> None:
    """Mark the manifest complete, with the counts (``documents`` read in all), the shards and the skipped
    documents, and write it."""
    if not infos:
        raise ValueError(f"{source} holds no documents")
    shards = [{"file": SHARD.format(k), **{key: infos[k][key] for key in ("documents", "rows", "tokens")}}
              for k in sorted(infos)]
    skipped = [s for k in sorted(infos) for s in infos[k]["skipped"]]
    run.update(finished=utc_timestamp(), seconds=round(time.monotonic() - started, 3))
    manifest.update(status="complete", counts={
        "documents": documents, "embedded": documents - len(skipped), "skipped": len(skipped),
        "rows": sum(s["rows"] for s in shards), "tokens": sum(s["tokens"] for s in shards), "shards": len(shards),
        "seconds": round(sum(r.get("seconds", 0.0) for r in manifest["runs"]), 3)},
        shards=shards, skipped=skipped)
    write_json_atomic(out / MANIFEST, manifest)
