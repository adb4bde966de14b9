"""Documents in: the documents of ``avey-b embed``'s INPUT, in order, each with its id and where it was read.

The files are found and read by :mod:`avey_b.data.corpus` (the pretraining corpus's readers: file resolution,
suffixes, strict UTF-8 lines, JSON lines, Parquet rows, streamed Hugging Face datasets); this module adds embed's
rules: the columns (text, id, chunk spans, the kept columns), each checked with the file and line it was read from,
the ``id`` field taken by default where the rows have one, and the ids made up from where a document was read where
they have none (the package docstring).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from avey_b.apps.embed.options import EmbedOptions
from avey_b.data import corpus


@dataclass
class Document:
    id: str
    text: str
    where: str
    """Where it was read (``file, line N``), for messages."""
    spans: list[tuple[int, int]] | None = None
    """Character spans of its chunks (``--chunk-spans-column``)."""
    kept: dict | None = None
    """The values of ``--keep-columns``, by column (a JSON null, or a Parquet null, is None)."""

#: The field that gives the ids when ``--id-column`` is not given, in the rows that have it.
DEFAULT_ID_COLUMN = "id"


def local_files(source: str) -> tuple[Path, list[Path]]:
    """``source`` (a file or a directory) and its supported files, in sorted order (:func:`corpus.resolve_files`)."""
    if not Path(source).exists():
        raise FileNotFoundError(f"input not found: {source!r} (give a file, a directory or hf:NAME)")
    return Path(source), corpus.resolve_files([source])


def check_columns(source: str, options: EmbedOptions) -> None:
    """Refuse column options that a text file of ``source`` cannot have, before anything is read."""
    flags = [flag for flag, on in (("--id-column", options.id_column), ("--chunk-spans-column",
                                                                       options.chunk_spans_column),
                                    ("--keep-columns", options.keep_columns)) if on]
    if source.startswith("hf:") or not flags:
        return
    for f in local_files(source)[1]:
        if f.suffix.lower() in corpus.TEXT_SUFFIXES:
            raise ValueError(f"{f}: a text file has no columns, so {flags[0]} cannot apply to it (use .jsonl, "
                             ".parquet or hf: input)")


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


def _document(row: dict, where: str, default_id: str, id_column: str | None, options: EmbedOptions) -> Document:
    text = _field(row, options.text_column, where, "text")
    if not isinstance(text, str):
        raise ValueError(f"{where}: the text column {options.text_column!r} holds a {type(text).__name__}, not a "
                         "string")
    doc_id = str(_field(row, id_column, where, "id")) if id_column else default_id
    spans_column = options.chunk_spans_column
    spans = _spans(_field(row, spans_column, where, "chunk spans"), text, where, spans_column) if spans_column else None
    kept = None
    if options.keep_columns:
        missing = [c for c in options.keep_columns if c not in row]
        if missing:
            raise KeyError(f"{where}: no column {missing[0]!r} to keep (--keep-columns; columns: {sorted(row)})")
        kept = {c: row[c] for c in options.keep_columns}
    return Document(doc_id, text, where, spans, kept)


class _IdRule:
    """Which field gives the ids of one file's (or one ``hf:`` dataset's) rows: ``--id-column``; else ``id`` when
    the first row has one, and then every row must; else none (made-up ids), and then no row may have one."""

    def __init__(self, options: EmbedOptions):
        self.given, self.column, self.first = options.id_column, options.id_column, None

    def __call__(self, row: dict, where: str) -> str | None:
        if self.given:
            return self.given
        if self.first is None:
            self.first = where
            self.column = DEFAULT_ID_COLUMN if DEFAULT_ID_COLUMN in row else None
        elif self.column is None and DEFAULT_ID_COLUMN in row:
            raise ValueError(f"{where}: the row has an {DEFAULT_ID_COLUMN!r} field but the first row ({self.first}) "
                             "has none: give every row an id or none (then ids are made up from where each row was "
                             "read), or name the id field with --id-column")
        return self.column


def _columns(options: EmbedOptions, names: Sequence[str] | None = None) -> list[str]:
    """The columns to read of a Parquet file whose columns are ``names`` (None: a JSON-lines file, read whole)."""
    id_column = options.id_column or (DEFAULT_ID_COLUMN if names is not None and DEFAULT_ID_COLUMN in names else None)
    return [c for c in (options.text_column, id_column, options.chunk_spans_column, *options.keep_columns) if c]


def _parquet_names(path: Path) -> list[str] | None:
    if path.suffix.lower() not in corpus.PARQUET_SUFFIXES:
        return None
    import pyarrow.parquet as pq

    return pq.read_schema(path).names


def read_documents(source: str, options: EmbedOptions = EmbedOptions()) -> Iterator[Document]:
    """The documents of ``source`` in order, with their ids (the package docstring gives the formats and the
    made-up ids). Text is strict UTF-8 and a bad row is an error naming the file and line (:mod:`avey_b.utils.files`);
    so is a missing column of ``--keep-columns`` (Parquet: naming the file and its columns)."""
    if source.startswith("hf:"):
        split, id_rule = options.hf_split, _IdRule(options)
        for i, row in enumerate(corpus.open_hf_stream(source[3:], options.hf_config, split)):
            where = f"{source} ({split}) row {i}"
            yield _document(row, where, f"{split}:{i}", id_rule(row, where), options)
        return
    check_columns(source, options)
    for f, name in input_files(source):
        yield from file_documents(f, name, options)


def input_files(source: str) -> Iterator[tuple[Path, str]]:
    """The files of a local ``source`` in order, each with the name its made-up ids use (the path relative to a
    directory ``source``, or the file's name)."""
    root, files = local_files(source)
    for f in files:
        yield f, f.relative_to(root).as_posix() if root.is_dir() else f.name


def file_documents(f: Path, name: str, options: EmbedOptions) -> Iterator[Document]:
    """The documents of one input file (:func:`read_documents`), ``name`` the file's name in made-up ids."""
    if f.suffix.lower() not in corpus.TEXT_SUFFIXES:
        id_rule = _IdRule(options)
        for position, where, row in corpus.iter_rows(f, _columns(options, _parquet_names(f))):
            yield _document(row, where, f"{name}:{position}", id_rule(row, where), options)
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
