"""Your data files as rows with named columns, read strictly: every error names the file and the line (or the row
of a Parquet file or a Hugging Face dataset).

* :func:`read_table` — CSV, TSV (a header line), JSONL, Parquet, or ``hf:NAME[:CONFIG][@SPLIT]`` (a Hugging Face
  dataset by Hub name, or a local directory: one written by ``Dataset.save_to_disk`` or one of data files; offline
  when the name is a local path) -> a :class:`Table` holding the columns asked for, with where each row came from.
* :func:`is_conll` — whether token-classification reads a file as CoNLL columns (read by
  :func:`avey_b.data.conll.read_conll`).
* :func:`hold_out` — the training rows split into training and held-out rows with a fixed seed;
  :func:`read_split` — a run's training and validation rows (``--validation-file`` or that split).

The task modules check the values (an empty text, a label that is not a class); :meth:`Table.where` words where a
row came from for their errors. :meth:`Table.to_dataset` gives the ``datasets.Dataset`` a trainer takes.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from typing import Any

from avey_b.utils.files import DataFileError, iter_jsonl, read_rows

#: File name endings of each format (others are refused, naming these).
FORMATS = {"csv": (".csv",), "tsv": (".tsv", ".tab"), "jsonl": (".jsonl", ".json", ".ndjson"),
           "parquet": (".parquet", ".pq")}
HF_PREFIX = "hf:"


@dataclass
class Table:
    """Rows of one data source, with the columns that were asked for."""

    source: str
    """The file (or ``hf:`` name) the rows came from."""
    rows: list[dict[str, Any]]
    """One mapping per row: column name -> value."""
    places: list[str] = field(default_factory=list)
    """Where each row came from: ``"line 12"`` (text files) or ``"row 12"`` (Parquet, hf:), 1-based."""

    def where(self, i: int) -> str:
        """``"reviews.csv, line 12"``: the file and line (or row) of row ``i``, for an error message."""
        return f"{self.source}, {self.places[i]}"

    def __len__(self) -> int:
        return len(self.rows)

    def select(self, indices: list[int]) -> Table:
        return Table(self.source, [self.rows[i] for i in indices], [self.places[i] for i in indices])

    def column(self, name: str) -> list[Any]:
        return [r[name] for r in self.rows]

    def to_dataset(self, columns: dict[str, list[Any]] | None = None):
        """A ``datasets.Dataset`` of the rows (or of ``columns``, values already converted)."""
        import datasets

        if columns is None:
            columns = {k: [r[k] for r in self.rows] for k in (self.rows[0] if self.rows else {})}
        return datasets.Dataset.from_dict(columns)


def file_format(path: str) -> str:
    """``csv``, ``tsv``, ``jsonl``, ``parquet`` or ``hf`` for a data source, from its ending (or ``hf:``)."""
    if path.startswith(HF_PREFIX):
        return "hf"
    lower = path.lower()
    for name, endings in FORMATS.items():
        if lower.endswith(endings):
            return name
    known = ", ".join(e for endings in FORMATS.values() for e in endings)
    raise DataFileError(f"{path}: unknown data format (file names ending in {known}, or hf:NAME[:CONFIG][@SPLIT])")


def parse_hf(source: str) -> tuple[str, str | None, str]:
    """``hf:NAME[:CONFIG][@SPLIT]`` -> (name, config, split); the split defaults to ``train``."""
    rest = source[len(HF_PREFIX):]
    rest, _, split = rest.partition("@")
    name, _, config = rest.partition(":")
    if not name:
        raise ValueError(f"{source!r}: expected hf:NAME[:CONFIG][@SPLIT] (e.g. hf:stanfordnlp/imdb@test)")
    return name, config or None, split or "train"


def _raw_rows(source: str) -> tuple[list[dict[str, Any]], list[str]]:
    kind = file_format(source)
    if kind in ("csv", "tsv"):
        numbered = read_rows(source, "," if kind == "csv" else "\t")
        return [r for _, r in numbered], [f"line {n}" for n, _ in numbered]
    if kind == "jsonl":
        numbered = list(iter_jsonl(source))
        return [r for _, r in numbered], [f"line {n}" for n, _ in numbered]
    if kind == "parquet":
        if not os.path.isfile(source):
            raise FileNotFoundError(f"data file not found: {source}")
        import pyarrow.parquet as pq

        rows = pq.read_table(source).to_pylist()
        return rows, [f"row {i}" for i in range(1, len(rows) + 1)]
    rows = list(_load_hf(source))
    return rows, [f"row {i}" for i in range(1, len(rows) + 1)]


def _load_hf(source: str):
    import datasets

    name, config, split = parse_hf(source)
    if os.path.isdir(name) and any(os.path.exists(os.path.join(name, f)) for f in ("state.json", "dataset_dict.json")):
        loaded = datasets.load_from_disk(name)  # a Dataset or DatasetDict written by save_to_disk
        if isinstance(loaded, datasets.DatasetDict):
            if split not in loaded:
                raise DataFileError(f"{source}: no split {split!r} (the dataset has {sorted(loaded)}; name one as "
                                    "hf:NAME@SPLIT)")
            loaded = loaded[split]
        return loaded
    try:
        return datasets.load_dataset(name, config, split=split)
    except ValueError as e:  # an unknown split or config: the datasets message, prefixed with the source
        raise DataFileError(f"{source}: {e}") from e


def read_table(source: str, columns: dict[str, str | None], *, task: str,
               optional: dict[str, str | None] | None = None) -> Table:
    """The rows of ``source`` with the columns ``columns`` names (role -> column name; None: not used), each row
    holding the columns under their names. A missing column is an error naming the source, the row and the
    columns that are there. ``optional`` names columns used when the first row has them (then every row must)."""
    rows, places = _raw_rows(source)
    if not rows:
        raise DataFileError(f"{source}: no rows")
    present = {role: name for role, name in (optional or {}).items() if name is not None and name in rows[0]}
    wanted = {role: name for role, name in {**columns, **present}.items() if name is not None}
    for i, row in enumerate(rows):
        missing = [f"{role} column {name!r} (--{role.replace('_', '-')}-column)" for role, name in wanted.items()
                   if name not in row]
        if missing:
            raise DataFileError(f"{source}, {places[i]}: no {' and no '.join(missing)} for {task}; the columns "
                                f"there are {sorted(row)}")
    names = list(dict.fromkeys(wanted.values()))
    return Table(source, [{n: row[n] for n in names} for row in rows], places)


def is_conll(path: str) -> bool:
    """Whether token-classification reads ``path`` as CoNLL columns: any file that is not JSONL, Parquet or
    ``hf:`` (word-per-line TSV files included)."""
    try:
        return file_format(path) not in ("jsonl", "parquet", "hf")
    except DataFileError:
        return True


def hold_out(table: Table, fraction: float, seed: int = 0) -> tuple[Table, Table]:
    """(training rows, held-out rows): ``fraction`` of the rows (at least one) drawn with ``seed``, each part in
    file order."""
    n = len(table)
    n_held = max(1, round(fraction * n))
    if n_held >= n:
        raise DataFileError(f"{table.source}: {n} row(s) are too few to hold out {fraction:g} of them for "
                            "validation and train on the rest; give --validation-file")
    order = list(range(n))
    random.Random(seed).shuffle(order)
    held = sorted(order[:n_held])
    kept = sorted(order[n_held:])
    return table.select(kept), table.select(held)


def read_split(options, columns: dict[str, str | None], read=None) -> tuple[Table, Table]:
    """(training rows, validation rows) of ``options`` (an :class:`~avey_b.finetuning.options.OwnDataOptions`):
    ``--validation-file``, else ``--validation-fraction`` of the training rows held out (seed 0); then
    ``--max-train-examples``. ``read(source) -> Table`` defaults to
    :func:`avey_b.finetuning.data.read_table` of ``columns``."""
    read = read or (lambda source: read_table(source, columns, task=options.task))
    train = read(options.train_file)
    if options.validation_file is not None:
        validation = read(options.validation_file)
    else:
        train, validation = hold_out(train, options.validation_fraction)
    if options.max_train_examples is not None:
        train = train.select(list(range(min(options.max_train_examples, len(train)))))
    return train, validation
