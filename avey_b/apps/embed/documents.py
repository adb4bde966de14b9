"""Documents in: the documents of ``avey-b embed``'s INPUT, in order, each with its id and where it was read.

The files are found and read by :mod:`avey_b.data.corpus` (the pretraining corpus's readers: file resolution,
suffixes, strict UTF-8 lines, JSON lines, Parquet rows, streamed Hugging Face datasets); this module adds embed's
rules: the columns (text, id, chunk spans), each checked with the file and line it was read from, and the ids made
up from where a document was read (the package docstring).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from avey_b.apps.options import EmbedOptions
from avey_b.data import corpus


@dataclass
class Document:
    id: str
    text: str
    where: str
    """Where it was read (``file, line N``), for messages."""
    spans: list[tuple[int, int]] | None = None
    """Character spans of its chunks (``--chunk-spans-column``)."""


def local_files(source: str) -> tuple[Path, list[Path]]:
    """``source`` (a file or a directory) and its supported files, in sorted order (:func:`corpus.resolve_files`)."""
    if not Path(source).exists():
        raise FileNotFoundError(f"input not found: {source!r} (give a file, a directory or hf:NAME)")
    return Path(source), corpus.resolve_files([source])


def check_columns(source: str, options: EmbedOptions) -> None:
    """Refuse column options that a text file of ``source`` cannot have, before anything is read."""
    if source.startswith("hf:") or not (options.id_column or options.chunk_spans_column):
        return
    for f in local_files(source)[1]:
        if f.suffix.lower() in corpus.TEXT_SUFFIXES:
            flag = "--id-column" if options.id_column else "--chunk-spans-column"
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


def _document(row: dict, where: str, default_id: str, options: EmbedOptions) -> Document:
    text = _field(row, options.text_column, where, "text")
    if not isinstance(text, str):
        raise ValueError(f"{where}: the text column {options.text_column!r} holds a {type(text).__name__}, not a "
                         "string")
    doc_id = str(_field(row, options.id_column, where, "id")) if options.id_column else default_id
    spans_column = options.chunk_spans_column
    spans = _spans(_field(row, spans_column, where, "chunk spans"), text, where, spans_column) if spans_column else None
    return Document(doc_id, text, where, spans)


def _columns(options: EmbedOptions) -> Sequence[str]:
    return [c for c in (options.text_column, options.id_column, options.chunk_spans_column) if c]


def read_documents(source: str, options: EmbedOptions = EmbedOptions()) -> Iterator[Document]:
    """The documents of ``source`` in order, with their ids (the package docstring gives the formats and the
    made-up ids). Text is strict UTF-8 and a bad row is an error naming the file and line (:mod:`avey_b.utils.files`)."""
    if source.startswith("hf:"):
        split = options.hf_split
        for i, row in enumerate(corpus.open_hf_stream(source[3:], options.hf_config, split)):
            yield _document(row, f"{source} ({split}) row {i}", f"{split}:{i}", options)
        return
    check_columns(source, options)
    root, files = local_files(source)
    for f in files:
        name = f.relative_to(root).as_posix() if root.is_dir() else f.name
        if f.suffix.lower() not in corpus.TEXT_SUFFIXES:
            for position, where, row in corpus.iter_rows(f, _columns(options)):
                yield _document(row, where, f"{name}:{position}", options)
        elif options.lines:
            for lineno, line in corpus.iter_txt(f, "line"):
                yield Document(f"{name}:{lineno}", line, f"{f}, line {lineno}")
        else:
            yield Document(name, next(corpus.iter_txt(f, "file"))[1], str(f))


def count_documents(source: str, options: EmbedOptions = EmbedOptions()) -> int | None:
    """How many documents :func:`read_documents` will yield, counted cheaply (Parquet footers, lines; no parsing),
    for the progress ETA; None for ``hf:`` sources."""
    if source.startswith("hf:"):
        return None
    return sum(corpus.count_documents(f, "line" if options.lines else "file") for f in local_files(source)[1])
