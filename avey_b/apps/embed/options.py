"""The options of ``avey-b embed``, declared once: :class:`EmbedOptions`, whose documented fields build the command
line (:func:`avey_b.configs.add_arguments`), the Python API (:func:`avey_b.apps.embed.embed_corpus` takes them) and
the manifest's record (:class:`avey_b.apps.embed.storage.Settings`). Standard library only, so that ``avey-b embed
--help`` imports no torch.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from avey_b import configs
from avey_b.inference.options import MAX_BATCH_TOKENS, OUTPUTS, LoadOptions, add_load_arguments
from avey_b.utils.cluster import BACKENDS, check_backend

#: What ``--chunking`` may be: ``none``, one vector per document; ``late``, one per chunk (late chunking).
CHUNKINGS = ("none", "late")
#: The stored vectors' types.
VECTOR_DTYPES = ("float32", "float16")
#: The columns embed writes (``--keep-columns`` may not name them).
OUTPUT_COLUMNS = ("id", "chunk", "char_start", "char_end", "n_tokens", "text", "vector", "sparse_indices",
                  "sparse_values", "multivector")
#: Tokens per shard when ``--shard-tokens`` is not given, and so the work a kill can lose: one full batch of the
#: default ``--max-batch-tokens`` (smaller shards would make smaller batches; what that costs in time on a CPU:
#: benchmarks/embed/README.md, "Shard size").
DEFAULT_SHARD_TOKENS = MAX_BATCH_TOKENS
#: A document longer than this many tokens is encoded in pieces when ``--long-document-tokens`` is not given: two
#: blocks of :class:`avey_b.model.streaming.DocumentState`'s default ``block_tokens``.
LONG_DOCUMENT_TOKENS = 32768


@dataclass(frozen=True)
class EmbedOptions:
    """The options of ``avey-b embed`` and of :func:`avey_b.apps.embed.embed_corpus`: how documents are read,
    chunked, embedded and stored, and where the work runs (the user guide is the ``avey_b.apps.embed`` docstring,
    ``avey-b embed --help``). Values are checked when the options are made."""

    lines: bool = False
    """.txt input: one document per non-blank line (default: one per file)"""
    text_column: str = "text"
    """the text field of .jsonl/.parquet/hf: rows"""
    id_column: str | None = None
    """the id field (default: the field `id` where the rows have one, else ids made up from file and line); ids must
    be unique"""
    keep_columns: tuple[str, ...] | None = None
    """.jsonl/.parquet/hf: input fields stored beside the vectors, with their types (`--keep-columns source,meta`
    or `--keep-columns source meta`)"""
    with_text: bool = False
    """store each row's text: the document's, or with late chunking the chunk's (`text`)"""
    hf_config: str | None = None
    """hf: input: the dataset's configuration"""
    hf_split: str = "train"
    """hf: input: the split"""
    chunking: str = "none"
    """late: one forward per document, one vector per chunk"""
    chunk_tokens: int | None = None
    """late chunking: text tokens per chunk"""
    chunk_overlap: int = 0
    """late chunking with --chunk-tokens: tokens that consecutive chunks share (less than --chunk-tokens)"""
    chunk_spans_column: str | None = None
    """late chunking: a column of [start, end) character spans per document"""
    dtype: str = "float32"
    """the stored vectors' type"""
    outputs: tuple[str, ...] = ("dense",)
    """what each row stores, a comma list: dense (`vector`), sparse (SPLADE's non-zero weights from a masked-LM
    checkpoint: `sparse_indices` int32 vocabulary ids, ascending, and `sparse_values` float32; documents run whole,
    up to --max-tokens), multivector (a multi-vector model's token vectors, `multivector`: one per token, special
    tokens included; `avey-b finetune --task multi-vector` trains one); sparse and multivector not with --chunking
    late or --update"""
    shard_tokens: int | None = None
    """tokens per Parquet shard at most, the work a kill can lose (a longer document is a shard alone); default:
    32,768, one full batch of the default --max-batch-tokens (the faster the device, the more tokens a shard may hold
    for the same loss at a kill, and the fewer files: benchmarks/embed/), or what the run being resumed used"""
    shard_size: int | None = None
    """documents per Parquet shard at most, besides --shard-tokens (default: no such cap, or what the run being
    resumed used)"""
    max_tokens: int | None = None
    """longest document embedded (longer: skipped and listed, never cut); default: what memory allows, as avey-b
    serve computes it (half the available memory), kept from the first run on a resume"""
    max_batch_tokens: int = MAX_BATCH_TOKENS
    """padded tokens per batch (a single longer document runs alone)"""
    long_document_tokens: int = LONG_DOCUMENT_TOKENS
    """a longer document is encoded in pieces, in memory that does not grow with its length, where the model
    allows it (the start line says so); the same vectors"""
    load: LoadOptions = field(default_factory=LoadOptions)
    """how the model loads: device, precision and CPU threads (with ray: each actor's); the eager model only (no
    --onnx)"""
    backend: str = "local"
    """ray: the same job as a Ray Data pipeline of model-holding actors (pip install 'avey-b[ray]')"""
    ray_address: str | None = None
    """ray: the cluster to join (auto: the one this machine belongs to); default: a local Ray"""
    concurrency: int = 1
    """ray: actors, each holding the model"""
    num_gpus: float | None = None
    """ray: GPUs per actor (default: 1 where the cluster has GPUs, else 0)"""
    ray_wave: int = 8
    """ray: shards per actor read at once (the driver holds one wave's text, and each wave is one Ray Data
    pipeline whose actors load the model once); changes memory and scheduling, never the output"""
    progress: bool = True
    """a progress line with rate and ETA on stderr"""
    update: bool = False
    """bring OUTPUT to INPUT's documents, by id: unchanged ones skipped, appended and edited ones computing only
    the splits the change reaches, new ones encoded, removed ones dropped; keeps each document's state beside the
    shards for the next update (a new OUTPUT: a fresh run that keeps them)"""

    def __post_init__(self):
        if self.update and self.backend != "local":
            raise ValueError("--update runs on the local backend (drop --backend ray)")
        if self.chunking not in CHUNKINGS:
            raise ValueError(f"chunking must be one of {CHUNKINGS}, got {self.chunking!r}")
        if self.chunking == "late" and (self.chunk_tokens is None) == (self.chunk_spans_column is None):
            raise ValueError("--chunking late needs exactly one of --chunk-tokens N or --chunk-spans-column COL")
        if self.chunking == "none" and (self.chunk_tokens is not None or self.chunk_spans_column is not None):
            raise ValueError("--chunk-tokens and --chunk-spans-column apply with --chunking late")
        if self.chunk_tokens is not None and self.chunk_tokens < 1:
            raise ValueError(f"--chunk-tokens must be at least 1, got {self.chunk_tokens}")
        if self.chunk_overlap and self.chunk_tokens is None:
            raise ValueError("--chunk-overlap applies with --chunking late --chunk-tokens N (character spans overlap "
                             "as they are given)")
        if self.chunk_tokens is not None and not 0 <= self.chunk_overlap < self.chunk_tokens:
            raise ValueError(f"--chunk-overlap must be at least 0 and less than --chunk-tokens "
                             f"({self.chunk_tokens}), got {self.chunk_overlap}")
        if self.keep_columns is None:
            object.__setattr__(self, "keep_columns", ())
        if isinstance(self.keep_columns, str):
            raise TypeError(f"keep_columns is a tuple of column names, got the string {self.keep_columns!r}")
        keep = tuple(c.strip() for item in self.keep_columns for c in item.split(","))  # a,b,c or a b c
        if "" in keep or len(set(keep)) != len(keep):
            raise ValueError(f"--keep-columns: empty or repeated column names in {','.join(self.keep_columns)!r}")
        taken = [c for c in keep if c in OUTPUT_COLUMNS]
        if taken:
            raise ValueError(f"--keep-columns: {taken[0]!r} is a column embed writes itself "
                             f"({', '.join(OUTPUT_COLUMNS)}); the document's text is stored by --with-text, its id "
                             "by --id-column")
        object.__setattr__(self, "keep_columns", keep)
        object.__setattr__(self, "outputs", output_kinds(self.outputs, self))
        if self.dtype not in VECTOR_DTYPES:
            raise ValueError(f"dtype must be one of {VECTOR_DTYPES}, got {self.dtype!r}")
        if self.load.onnx is not None:
            raise ValueError("avey-b embed runs the eager model: LoadOptions.onnx does not apply")
        check_backend(self.backend, {"--ray-address": self.ray_address is not None, "--concurrency":
                                     self.concurrency != 1, "--num-gpus": self.num_gpus is not None})
        for name in ("shard_size", "shard_tokens", "max_batch_tokens", "max_tokens", "concurrency", "ray_wave",
                     "long_document_tokens"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")


def output_kinds(given, options: EmbedOptions) -> tuple[str, ...]:
    """``--outputs`` (``dense,sparse`` or ``dense sparse``) checked against :data:`OUTPUTS` and ``options``,
    in that tuple's order (the same outputs are the same settings, however listed). What each stores per row:
    ``dense`` the column ``vector``, ``sparse`` ``sparse_indices`` and ``sparse_values``, ``multivector`` the
    column ``multivector`` (a list of fixed-size token vectors)."""
    if isinstance(given, str):
        raise TypeError(f"outputs is a tuple of names, got the string {given!r}")
    names = [n.strip() for item in given for n in item.split(",")]
    unknown = [n for n in names if n not in OUTPUTS]
    if unknown or not names or len(set(names)) != len(names):
        raise ValueError(f"--outputs: {','.join(given)!r} is not a list of distinct kinds among "
                         f"{', '.join(OUTPUTS)}")
    for kind, what in (("sparse", "one sparse vector per document"),
                       ("multivector", "a document's token vectors in its row")):
        if kind in names and options.chunking == "late":
            raise ValueError(f"--outputs {kind} stores {what}: it does not apply with --chunking late (one row per "
                             "chunk)")
        if kind in names and options.update:
            raise ValueError(f"--update keeps each document's state for dense vectors only: --outputs {kind} is not "
                             "updated in place; embed into a new OUTPUT without --update")
    return tuple(n for n in OUTPUTS if n in names)


def embed_parser() -> argparse.ArgumentParser:
    """``avey-b embed MODEL INPUT OUTPUT [options]``: one flag per :class:`EmbedOptions` field, and per field of its
    :class:`LoadOptions` but ``onnx``; the help's text is the user guide, :mod:`avey_b.apps.embed`'s docstring."""
    parser = configs.guide_parser("avey-b embed", "avey_b.apps.embed")
    parser.add_argument("model", help="a saved Avey-B (local directory or Hub id) with its tokenizer")
    parser.add_argument("input", help="a .txt/.jsonl/.parquet file, a directory of them, or hf:NAME")
    parser.add_argument("output", help="the directory of Parquet shards and _manifest.json (new, or the one to resume)")
    configs.add_arguments(parser, EmbedOptions, exclude=("load",),
                          choices={"chunking": CHUNKINGS, "dtype": VECTOR_DTYPES, "backend": BACKENDS})
    add_load_arguments(parser, exclude=("onnx",))
    return parser


def embed_options(args: argparse.Namespace) -> EmbedOptions:
    """The :class:`EmbedOptions` of :func:`embed_parser`'s arguments."""
    return configs.from_args(EmbedOptions, args, load=configs.from_args(LoadOptions, args))
