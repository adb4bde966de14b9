"""Document sources for pretraining: local files, Hugging Face ``datasets`` (streamed), and the built-in
``python-docs`` corpus. The readers of local files (:func:`resolve_files`, :func:`iter_txt`, :func:`iter_rows`,
:func:`count_documents`) and of Hugging Face streams (:func:`open_hf_stream`) also serve ``avey-b embed``, which
keeps where each document was read for its ids.

A *source spec* is one string (or a list of strings for several local paths), so one flag swaps corpora:

* ``"python-docs"`` — real English text that ships with every Python interpreter: the ``pydoc_data.topics``
  help texts plus the docstrings of the standard library's modules, classes and functions (read with
  ``ast`` from the ``.py`` sources, never imported, so no module side effects), with hard-wrapped lines
  joined into paragraphs, deduplicated. No network.
* ``"hf:NAME"`` — a Hugging Face dataset, always opened with ``streaming=True`` so it is never fully
  downloaded (e.g. ``hf:HuggingFaceFW/fineweb`` with ``hf_config="sample-10BT"``).
* anything else — a local file or directory (searched recursively, files in sorted order):
  ``.txt`` (one document per blank-line-separated paragraph, per line, or per file: ``txt_mode``),
  ``.jsonl`` / ``.json`` lines (the ``text_field``), ``.parquet`` (the ``text_field`` column).

Documents come out as ``(index, text)`` with a stable ``index`` (the position in the source), which is what
makes the packing position resumable. The held-out split is by content hash (``is_heldout``), so it is the
same whatever the order, sharding or size of the stream, and train and held-out never share a document.
"""

from __future__ import annotations

import ast
import hashlib
import os
import sysconfig
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from pydoc_data.topics import topics

import torch

from avey_b.utils.files import iter_jsonl, iter_lines, read_text

TEXT_SUFFIXES = (".txt", ".text", ".md", ".rst")
JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")
PARQUET_SUFFIXES = (".parquet",)
SUPPORTED_SUFFIXES = TEXT_SUFFIXES + JSONL_SUFFIXES + PARQUET_SUFFIXES
BUILTIN = "python-docs"
TXT_MODES = ("paragraph", "line", "file")


@dataclass(frozen=True)
class SourceSpec:
    """Where documents come from (see the module docstring for the forms of ``source``)."""

    source: str | tuple[str, ...]
    text_field: str = "text"
    txt_mode: str = "paragraph"
    hf_config: str | None = None
    hf_split: str = "train"
    min_chars: int = 1
    shuffle_seed: int | None = None
    """If set, documents come in a seeded random order that changes every epoch (local and built-in sources
    are read into memory for this; HF streams use ``datasets``' shuffle buffer of ``shuffle_buffer`` rows)."""
    shuffle_buffer: int = 10_000
    extra: dict = field(default_factory=dict, compare=False)

    def __post_init__(self):
        if isinstance(self.source, list):
            object.__setattr__(self, "source", tuple(self.source))
        if self.txt_mode not in TXT_MODES:
            raise ValueError(f"txt_mode must be one of {TXT_MODES}, got {self.txt_mode!r}")
        if not self.source:
            raise ValueError("the data source is empty: give a path, 'hf:NAME' or 'python-docs'")

    @property
    def kind(self) -> str:
        if isinstance(self.source, str) and self.source == BUILTIN:
            return "builtin"
        if isinstance(self.source, str) and self.source.startswith("hf:"):
            return "hf"
        return "local"

    def paths(self) -> list[str]:
        return [self.source] if isinstance(self.source, str) else list(self.source)


def is_heldout(text: str, fraction: float) -> bool:
    """Deterministic held-out membership by content hash (independent of order and sharding)."""
    if fraction <= 0:
        return False
    h = int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big")
    return (h % 1_000_000) < fraction * 1_000_000


def in_split(index: int, text: str, split: str, heldout_fraction: float = 0.0, heldout_docs: int = 0) -> bool:
    """Whether document ``index`` (its position in the stream) with ``text`` belongs to ``split`` ("train",
    "heldout" or "all"): the first ``heldout_docs`` documents are held out when that is set, else the
    ``heldout_fraction`` chosen by content hash (:func:`is_heldout`). The one rule every reader of a split applies
    (the training stream, the held-out stream, the tokenizer fitted on training text only)."""
    if split == "all":
        return True
    held = index < heldout_docs if heldout_docs > 0 else is_heldout(text, heldout_fraction)
    return held == (split == "heldout")


def iter_documents(spec: SourceSpec, start: int = 0, epoch: int = 0) -> Iterator[tuple[int, str]]:
    """Yield ``(index, text)`` for every document of the source, from document ``start`` on.

    ``index`` is the position in this epoch's order (the source order, or the seeded shuffle of ``epoch``).
    """
    kind = spec.kind
    if kind == "builtin":
        it: Iterator[str] = iter(python_docs_corpus())
    elif kind == "hf":
        it = _iter_hf(spec, epoch)
    else:
        it = _iter_local(spec)
    if spec.shuffle_seed is not None and kind != "hf":
        docs = list(it)
        g = torch.Generator().manual_seed(int(spec.shuffle_seed) * 1_000_003 + int(epoch))
        it = (docs[i] for i in torch.randperm(len(docs), generator=g).tolist())
    for i, text in enumerate(it):
        if i < start:
            continue
        if len(text) >= spec.min_chars:
            yield i, text


# ----------------------------------------------------------------------------------------------- local files
def resolve_files(paths: Sequence[str]) -> list[Path]:
    """Expand files/directories into the sorted list of supported files; fail on anything missing or empty."""
    files: list[Path] = []
    for p in paths:
        path = Path(os.path.expanduser(p))
        if not path.exists():
            raise FileNotFoundError(f"data source not found: {p!r} "
                                    "(give a file, a directory, 'hf:NAME' or 'python-docs')")
        if path.is_dir():
            found = sorted(f for f in path.rglob("*") if f.is_file() and f.suffix.lower() in SUPPORTED_SUFFIXES)
            if not found:
                raise ValueError(f"directory {p!r} holds no supported files ({', '.join(SUPPORTED_SUFFIXES)})")
            files.extend(found)
        else:
            if path.suffix.lower() not in SUPPORTED_SUFFIXES:
                raise ValueError(f"unsupported file type {path.suffix!r} for {p!r}; "
                                 f"supported: {', '.join(SUPPORTED_SUFFIXES)}")
            files.append(path)
    return files


def _iter_local(spec: SourceSpec) -> Iterator[str]:
    for f in resolve_files(spec.paths()):
        if f.suffix.lower() in TEXT_SUFFIXES:
            for _, text in iter_txt(f, spec.txt_mode):
                if text.strip():
                    yield text.strip()
            continue
        for _, where, row in iter_rows(f, [spec.text_field], hint="; set data.text_field"):
            if spec.text_field not in row:
                raise KeyError(f"{where}: no field {spec.text_field!r} (fields: {sorted(row)}); set data.text_field")
            if row[spec.text_field] is not None:
                yield str(row[spec.text_field])


def iter_txt(path: Path, mode: str) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of each document of a UTF-8 text file, its text as written (a non-UTF-8 byte is an
    error naming the file, line and byte offset): ``file``, the whole file (line 1); ``line``, each non-blank line;
    ``paragraph``, each block of non-blank lines (its first line's number), its lines joined by newlines."""
    if mode == "file":
        yield 1, read_text(path)
        return
    if mode == "line":
        yield from ((n, line) for n, line in iter_lines(path) if line.strip())
        return
    block: list[str] = []
    first = 0
    for n, line in iter_lines(path):
        if line.strip():
            first = first if block else n
            block.append(line)
        elif block:
            yield first, "\n".join(block)
            block = []
    if block:
        yield first, "\n".join(block)


def iter_rows(path: Path, columns: Sequence[str], *, hint: str = "") -> Iterator[tuple[int, str, dict]]:
    """``(position, where, row)`` for every row of a JSON-lines or Parquet file: for JSON lines each non-blank
    line's object (``position`` the line number, from 1; ``where`` ``"FILE, line N"``), for Parquet each row's
    ``columns`` (``position`` the row, from 0; ``where`` ``"FILE, row N"``). A Parquet file without one of
    ``columns`` is a ``KeyError`` naming the file, the column and the file's columns (then ``hint``); a JSON line
    without a field is the caller's to name, with ``where``."""
    if path.suffix.lower() in JSONL_SUFFIXES:
        for lineno, row in iter_jsonl(path):
            yield lineno, f"{path}, line {lineno}", row
        return
    import pyarrow.parquet as pq  # ships with `datasets`; the `embed` extra

    pf = pq.ParquetFile(path)
    names = pf.schema_arrow.names
    missing = [c for c in columns if c not in names]
    if missing:
        raise KeyError(f"{path}: no column {missing[0]!r} (columns: {names}){hint}")
    position = 0
    for batch in pf.iter_batches(columns=list(dict.fromkeys(columns)), batch_size=1024):
        for row in batch.to_pylist():
            yield position, f"{path}, row {position}", row
            position += 1


def count_documents(path: Path, txt_mode: str) -> int:
    """How many items :func:`iter_txt` (text files, in ``txt_mode``) or :func:`iter_rows` will yield for ``path``,
    counted cheaply: Parquet from its footer, the rest by lines, without parsing them."""
    suffix = path.suffix.lower()
    if suffix in TEXT_SUFFIXES:
        return 1 if txt_mode == "file" else sum(1 for _ in iter_txt(path, txt_mode))
    if suffix in JSONL_SUFFIXES:
        return sum(1 for _, line in iter_lines(path) if line.strip())
    import pyarrow.parquet as pq

    return pq.ParquetFile(path).metadata.num_rows


# ------------------------------------------------------------------------------------ Hugging Face datasets
def open_hf_stream(name: str, config: str | None = None, split: str = "train"):
    """The rows of a Hugging Face dataset (a Hub name or a local dataset directory), streamed: read shard by shard
    over the network, never materialized on disk in full. Needs ``datasets`` (the ``train`` extra)."""
    import datasets

    return datasets.load_dataset(name, config, split=split, streaming=True)


def _iter_hf(spec: SourceSpec, epoch: int = 0) -> Iterator[str]:
    name = spec.source[3:] if isinstance(spec.source, str) else spec.source[0][3:]
    ds = open_hf_stream(name, spec.hf_config, spec.hf_split)
    if spec.shuffle_seed is not None:
        ds = ds.shuffle(seed=int(spec.shuffle_seed), buffer_size=spec.shuffle_buffer)
        ds.set_epoch(epoch)  # a different, still deterministic, order every pass
    for row in ds:
        if spec.text_field not in row:
            raise KeyError(f"dataset {name!r} has no field {spec.text_field!r} (fields: {sorted(row)}); "
                           "set data.text_field")
        yield str(row[spec.text_field])


# ------------------------------------------------------------------------------------ built-in python-docs
_SKIP_DIRS = {"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__", "lib2to3", "turtledemo"}
_CACHE: list[str] | None = None


def _reflow(text: str) -> str:
    """Join the hard-wrapped lines of each paragraph (docstrings wrap at ~72 columns), keep paragraph breaks:
    the result reads like running English text instead of newline-and-indent tokens every few words."""
    paragraphs = [" ".join(p.split()) for p in text.strip().split("\n\n")]
    return "\n\n".join(p for p in paragraphs if p)


def python_docs_corpus(min_chars: int = 200) -> list[str]:
    """English documentation shipped with this Python: ``pydoc_data.topics`` + stdlib docstrings, deduplicated.

    Order is deterministic (topics by name, then files in sorted path order, docstrings in source order).
    Docstrings shorter than ``min_chars`` are dropped (mostly one-line signatures, not prose).
    """
    global _CACHE
    if _CACHE is not None:
        return _CACHE
    seen: set[str] = set()
    docs: list[str] = []

    def add(text: str) -> None:
        text = _reflow(text)
        key = " ".join(text.split())
        if len(text) >= min_chars and key not in seen:
            seen.add(key)
            docs.append(text)

    for name in sorted(topics):
        add(topics[name])
    root = Path(sysconfig.get_paths()["stdlib"])
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        for fn in sorted(filenames):
            if not fn.endswith(".py"):
                continue
            try:
                tree = ast.parse(Path(dirpath, fn).read_text(encoding="utf-8"))
            except (SyntaxError, UnicodeDecodeError, ValueError):
                continue  # a few stdlib files are deliberately invalid (e.g. bad-encoding test fixtures)
            for node in ast.walk(tree):
                if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    doc = ast.get_docstring(node)
                    if doc:
                        add(doc)
    if not docs:
        raise RuntimeError("found no documentation text in this Python installation (pydoc_data and stdlib sources)")
    _CACHE = docs
    return docs
