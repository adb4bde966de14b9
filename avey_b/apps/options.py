"""The options of the app verbs (``avey-b serve``, ``embed``, ``export``, ``analyze``, ``convert``, ``demo``,
``ablation``), each declared once: a dataclass whose documented fields build the command line
(:func:`avey_b.configs.add_arguments`), the Python API (the verb's function takes the dataclass) and what the verb
records. Standard library only, so that ``avey-b VERB --help`` imports no torch.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from avey_b import configs
from avey_b.apps import embed
from avey_b.utils.cluster import BACKENDS, check_backend

# ------------------------------------------------------------------------------------------ serve


# ------------------------------------------------------------------------------------------ embed
#: What ``--chunking`` may be: ``none``, one vector per document; ``late``, one per chunk (late chunking).
CHUNKINGS = ("none", "late")
#: The stored vectors' types.
VECTOR_DTYPES = ("float32", "float16")
PRECISIONS = ("auto", "bf16", "fp32")


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
    """the id field (default: ids made up from file and line)"""
    hf_config: str | None = None
    """hf: input: the dataset's configuration"""
    hf_split: str = "train"
    """hf: input: the split"""
    chunking: str = "none"
    """late: one forward per document, one vector per chunk"""
    chunk_tokens: int | None = None
    """late chunking: text tokens per chunk"""
    chunk_spans_column: str | None = None
    """late chunking: a column of [start, end) character spans per document"""
    dtype: str = "float32"
    """the stored vectors' type"""
    shard_size: int = 1000
    """documents per Parquet shard"""
    max_tokens: int | None = None
    """longest document embedded (longer: skipped and listed, never cut); default: what memory allows, as avey-b
    serve computes it (half the available memory), kept from the first run on a resume"""
    max_batch_tokens: int = 32_768
    """padded tokens per batch (a single longer document runs alone)"""
    device: str = "auto"
    """where the forwards run (auto: CUDA, then MPS, then the CPU)"""
    precision: str = "auto"
    """auto: bf16 autocast where the device multiplies bf16 natively, float32 elsewhere"""
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

    def __post_init__(self):
        if self.chunking not in CHUNKINGS:
            raise ValueError(f"chunking must be one of {CHUNKINGS}, got {self.chunking!r}")
        if self.chunking == "late" and (self.chunk_tokens is None) == (self.chunk_spans_column is None):
            raise ValueError("--chunking late needs exactly one of --chunk-tokens N or --chunk-spans-column COL")
        if self.chunking == "none" and (self.chunk_tokens is not None or self.chunk_spans_column is not None):
            raise ValueError("--chunk-tokens and --chunk-spans-column apply with --chunking late")
        if self.chunk_tokens is not None and self.chunk_tokens < 1:
            raise ValueError(f"--chunk-tokens must be at least 1, got {self.chunk_tokens}")
        if self.dtype not in VECTOR_DTYPES:
            raise ValueError(f"dtype must be one of {VECTOR_DTYPES}, got {self.dtype!r}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        check_backend(self.backend, {"--ray-address": self.ray_address is not None, "--concurrency":
                                     self.concurrency != 1, "--num-gpus": self.num_gpus is not None})
        for name in ("shard_size", "max_batch_tokens", "max_tokens", "concurrency", "ray_wave"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")


def embed_parser() -> argparse.ArgumentParser:
    """``avey-b embed MODEL INPUT OUTPUT [options]``: one flag per :class:`EmbedOptions` field; the help's text is
    the user guide of :mod:`avey_b.apps.embed` (whose package imports no torch)."""
    guide = embed.__doc__
    parser = argparse.ArgumentParser(prog="avey-b embed", description=guide.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=guide.split("\n\n", 1)[1])
    parser.add_argument("model", help="a saved Avey-B (local directory or Hub id) with its tokenizer")
    parser.add_argument("input", help="a .txt/.jsonl/.parquet file, a directory of them, or hf:NAME")
    parser.add_argument("output", help="the directory of Parquet shards and _manifest.json (new, or the one to resume)")
    configs.add_arguments(parser, EmbedOptions, choices={"chunking": CHUNKINGS, "dtype": VECTOR_DTYPES,
                                                         "precision": PRECISIONS, "backend": BACKENDS})
    return parser




# ------------------------------------------------------------------------------------------ export


# ------------------------------------------------------------------------------------------ analyze


# ------------------------------------------------------------------------------------------ convert


# ------------------------------------------------------------------------------------------ demo


# ------------------------------------------------------------------------------------------ ablation
