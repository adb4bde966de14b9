"""The options of the app verbs (``avey-b serve``, ``embed``, ``export``, ``analyze``, ``convert``, ``demo``,
``ablation``), each declared once: a dataclass whose documented fields build the command line
(:func:`avey_b.configs.add_arguments`), the Python API (the verb's function takes the dataclass) and what the verb
records. Standard library only, so that ``avey-b VERB --help`` imports no torch.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
from dataclasses import dataclass, field

from avey_b import configs
from avey_b.inference.options import MAX_BATCH_TOKENS, OUTPUTS, LoadOptions, add_load_arguments
from avey_b.utils.cluster import BACKENDS, check_backend

# ------------------------------------------------------------------------------------------ serve
#: ``--log-level``: the server's log (the access log is at info).
LOG_LEVELS = ("debug", "info", "warning", "error")


@dataclass
class ServeOptions:
    """What ``avey-b serve`` serves on, its limits, and how it batches (:func:`avey_b.apps.serve.build_app`). Each
    limit's refusal names the flag that sets it."""

    host: str = "127.0.0.1"
    """the address to listen on"""
    port: int = 8000
    """the port to listen on"""
    served_model_name: str | None = None
    """the model's name in every response and in /v1/models, and the only `model` a request may name (another:
    404); default: the model directory's name (a Hub id as given); a server path is never shown"""
    api_key: str | None = None
    """require `Authorization: Bearer KEY` on every route but /health and /openapi.json (without it: 401);
    default: the environment variable AVEY_B_API_KEY, if set (safer: a flag shows in the process list); none: no
    key asked"""
    allow_no_key_on_network: bool = False
    """serve with no API key on an address other than loopback (127.0.0.1, ::1, localhost): anyone who reaches
    the address uses the model; without this flag such a server refuses to start (give --api-key or
    AVEY_B_API_KEY instead)"""
    body_timeout_s: float = 30.0
    """a request's headers must arrive within this many seconds of its first byte (else the connection is closed),
    then its whole body within as many more (else 408 and the connection is closed), so that a slow client (a body
    sent a byte a second) cannot hold a connection"""
    keep_alive_s: float = 5.0
    """an idle keep-alive connection is closed after this many seconds"""
    max_connections: int = 512
    """open connections (and requests in flight) at most: past it a new request gets 503 at once"""
    drain_s: float = 1.0
    """after SIGTERM, every new request gets 503 (Connection: close) for at least this many seconds, and until the
    requests in flight are answered; then the port closes and the server exits"""
    log_level: str = "info"
    """the log on stderr: one access line per request at info (method, path, status, inputs, tokens, ms)"""
    max_tokens: int | None = None
    """longest input in tokens (longer: 413, never cut unless a TEI request asks truncate=true); default: what the
    memory allows (half the available memory, at avey_b.utils.batching's bytes per token of the model's width)"""
    max_input_chars: int = 2_000_000
    """longest input in characters, checked before tokenizing (longer: 413)"""
    max_body_bytes: int = 16 * 1024 * 1024
    """largest request body in bytes, checked before it is read (Content-Length) and while it is read (larger:
    413)"""
    max_request_inputs: int = 2048
    """inputs (texts, token-id lists, rerank documents) in one request at most (more: 413); a request's inputs are
    split across batches whatever their number"""
    max_batch_tokens: int = MAX_BATCH_TOKENS
    """padded tokens per batch (a single longer input runs alone)"""
    queue_size: int = 256
    """inputs waiting for the model at most, to bound the work in flight: a request that would pass it waits for
    no one and gets 503 (retry later), unless the queue is empty: a request that comes to an idle server is always
    taken, whatever its number of inputs (up to --max-request-inputs)"""
    batch_wait_ms: float = 0.0
    """how long the batcher waits for more inputs after the first before it runs what it holds (0: it takes what
    queued while the previous batch ran, and waits for nothing more): a wait can merge the requests of
    concurrent clients into fewer batches, and delays every request by up to that long; measurements:
    benchmarks/serve/README.md"""
    prefix_cache_bytes: int = 256 * 2**20
    """bytes of document states kept so that an input extending one already embedded (a growing conversation, an
    appended log) computes only its new part (0: off); least recently used evicted; answers are unchanged. Only for
    embeddings on the eager runtime of a model whose splits depend on earlier ones only (the start line says
    when it is off, and why); /metrics counts its hits, misses, tokens saved, bytes and evictions"""
    block_tokens: int | None = None
    """an embedding input of more tokens runs as a document state, this many tokens at a time, with the other
    requests' batches between its blocks (a short request waits for about one block, not the whole input) in
    memory bounded by the block (0: every input runs whole); default: the model's chunk of processor rows on
    the device (execution.processor_chunk_tokens); rounded down to whole splits"""

    def __post_init__(self):
        for name in ("max_input_chars", "max_body_bytes", "max_request_inputs", "max_batch_tokens", "queue_size",
                     "max_tokens"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
        for name in ("body_timeout_s", "keep_alive_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.max_connections < 1 or self.drain_s < 0:
            raise ValueError(f"max_connections must be at least 1 and drain_s at least 0, got "
                             f"{self.max_connections} and {self.drain_s}")
        for name in ("prefix_cache_bytes", "block_tokens"):
            if (value := getattr(self, name)) is not None and value < 0:
                raise ValueError(f"{name} must be at least 0, got {value}")
        if self.log_level not in LOG_LEVELS:
            raise ValueError(f"log_level must be one of {LOG_LEVELS}, got {self.log_level!r}")


def verb_parser(prog: str, module: str) -> argparse.ArgumentParser:
    """A verb's parser described by the docstring of its runner's ``module`` (first paragraph: the description; the
    rest: the epilog), read from the source without importing the module (which imports torch)."""
    spec = importlib.util.find_spec(module)
    with open(spec.origin, encoding="utf-8") as f:
        doc = ast.get_docstring(ast.parse(f.read())) or ""
    head, _, rest = doc.partition("\n\n")
    return argparse.ArgumentParser(prog=prog, description=head, epilog=rest,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)


def serve_parser() -> argparse.ArgumentParser:
    p = verb_parser("avey-b serve", "avey_b.apps.serve")
    p.add_argument("model", help="a saved Avey-B (local directory or Hub id) with its tokenizer")
    configs.add_arguments(p, ServeOptions, choices={"log_level": LOG_LEVELS})
    add_load_arguments(p)
    return p


# ------------------------------------------------------------------------------------------ embed
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
    parser = verb_parser("avey-b embed", "avey_b.apps.embed")
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


# ------------------------------------------------------------------------------------------ export
#: ``--head``: which model and output(s) to export (avey_b.apps.export.EXPORT_HEADS maps each to its class)
EXPORT_HEADS = ("base", "masked-lm", "sequence-classification", "token-classification", "embedding")


@dataclass
class ExportOptions:
    """What ``avey-b export`` writes (:func:`avey_b.apps.export.export`)."""

    head: str = "base"
    """which model and output to export: base (last_hidden_state), masked-lm or sequence-/token-classification
    (logits), embedding (a directory for ONNX-based servers: last_hidden_state and sentence_embedding)"""
    format: str = "onnx"
    """onnx, or torch (a torch.export program)"""
    verify: bool = True
    """run the ONNX model with onnxruntime at a few lengths and compare it with the eager model"""
    quantize: str | None = None
    """int8: also write the int8 model beside the ONNX model (model.int8.onnx: onnxruntime dynamic quantization of
    the weight MatMuls, avey_b.apps.quantize)"""

    def __post_init__(self):
        if self.quantize and self.format == "torch":
            raise ValueError("--quantize int8 quantizes the ONNX model: use it with --format onnx")


def export_parser() -> argparse.ArgumentParser:
    p = verb_parser("avey-b export", "avey_b.apps.export")
    p.add_argument("model", help="an Avey-B checkpoint (local directory or Hub id; release checkpoints too)")
    p.add_argument("out", help="output file (.onnx, or .pt2 with --format torch); a directory with --head embedding")
    configs.add_arguments(p, ExportOptions, choices={"head": EXPORT_HEADS, "format": ("onnx", "torch"),
                                                     "quantize": ("int8",)})
    return p


# ------------------------------------------------------------------------------------------ analyze
@dataclass
class AnalyzeOptions:
    """What ``avey-b analyze weights`` writes (:func:`avey_b.apps.analysis.analyze_weights`)."""

    output: str | None = None
    """directory for the table and heat maps (default: analysis/<MODEL, as one name>)"""
    max_layers: int | None = None
    """heat maps of at most this many static layers, spread uniformly over the depth (the paper shows 15 of the
    coupled model's 30); default: all"""
    heatmaps: bool = True
    """draw the heat maps (matplotlib, the analysis extra); --no-heatmaps: only the table"""
    paper_table: bool = False
    """the paper's table (appendix "Layer statistics for coupled vs. decoupled settings"): 15 static layers
    uniformly subsampled (every second of 30: static layers 2, 4, ..., 30, which hold the coupled layers 14, 22, 24
    and 26 the paper's figure names; all of them when there are 15 or fewer), numbered 1-15, and their average"""


def analyze_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="avey-b analyze", description="Analyses of a trained Avey-B (paper appendices).")
    sub = p.add_subparsers(dest="analysis", required=True, metavar="ANALYSIS")
    w = sub.add_parser("weights", help='static-layer statistics and heat maps of V (appendix "Coupled vs. '
                                       'Decoupled Layers: A Statistical Analysis")',
                       description="Per static layer of a saved Avey-B: mean, std, min, median, max, mean |w|, L1, "
                                   "L2, fraction positive, fraction negative of V (Markdown, JSON, CSV), and heat "
                                   "maps of V.")
    w.add_argument("model", help="a saved Avey-B directory (any head), or a Hub id")
    configs.add_arguments(w, AnalyzeOptions)
    return p


# ------------------------------------------------------------------------------------------ convert
@dataclass
class ConvertOptions:
    """Where ``avey-b convert`` finds a release checkpoint given as a Hub repo id (a local directory is read as is)."""

    revision: str | None = None
    "the Hub revision (branch, tag or commit) of a repo id"
    local_files_only: bool = False
    "never download: a repo id must be in the local Hub cache"


def convert_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="avey-b convert", description="Convert an authors' release Avey-B checkpoint "
                                "(hub repo id or local directory) into this library's format.")
    p.add_argument("src", help="release checkpoint: e.g. avey-ai/avey-b1-base-exp or a local download of it")
    p.add_argument("dst", help="output directory (save_pretrained format)")
    configs.add_arguments(p, ConvertOptions)
    return p


# ------------------------------------------------------------------------------------------ demo
@dataclass
class DemoOptions:
    """What ``avey-b demo`` times."""

    lengths: list[int] = field(default_factory=lambda: [1024, 4096, 16384])
    "sequence lengths to time (tokens)"
    threads: int | None = None
    """CPU threads (PyTorch's). auto: one per CPU this process may use, or OMP_NUM_THREADS, then the count that runs
    a forward fastest on this machine (on a CPU that other busy processes share, fewer; docs/threads.md); N: that
    count"""

    def __post_init__(self):
        if any(n < 1 for n in self.lengths):
            raise ValueError(f"--lengths must be positive, got {self.lengths}")
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"--threads must be at least 1, got {self.threads}")


def demo_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="avey-b demo", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Build a small, randomly initialized Avey-B and encode text, with no download: a byte-level BPE "
                    "tokenizer\ntrained on the documentation that ships with Python, the `small` preset, a padded "
                    "batch checked\nagainst each sentence encoded alone, and the forward pass timed at growing "
                    "lengths.\nThe weights are random: for a trained model see `avey-b pretrain`.")
    configs.add_arguments(p, DemoOptions)
    return p


# ------------------------------------------------------------------------------------------ ablation
@dataclass
class AblationOptions:
    """``avey-b ablation``: which variants file, which of its variants, and what to run of them."""

    variants: str
    """Variants YAML, or a shipped one's name: ablation_variants, nsk_variants, masking_base_variants,
    masking_large_variants."""
    only: list[str] | None = None
    """Run only these variants."""
    output_dir: str | None = None
    """Overrides the file's output_dir."""
    skip_pretrain: bool = False
    """Evaluate only variants already pretrained."""
    dry_run: bool = False
    """Resolve every variant (configs, no weights), print them, exit."""
    evaluate: list[str] | None = None
    """Flags of `avey-b evaluate` for the sweep, after `--` (e.g. `-- --tasks sst2 conll2003`)."""


def ablation_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="avey-b ablation", description="Reproduce the paper's ablation and "
                                "design-choice studies: pretrain each variant, evaluate, tabulate.")
    configs.add_arguments(p, AblationOptions, exclude=("evaluate",))
    p.add_argument("evaluate", nargs="*", metavar="-- EVALUATE_FLAGS",
                   help=configs.field_docs(AblationOptions)["evaluate"])
    return p
