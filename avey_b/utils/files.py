"""Reading data files strictly, with errors that name the file and the line.

Every reader of training and evaluation data (text, JSONL, TSV/CSV, CoNLL, SQuAD JSON, BEIR) goes through these:

* text is UTF-8 (a leading byte-order mark is allowed); anything else is a :class:`DataFileError` naming the
  file, the line and the byte offset, never a silent replacement character;
* a malformed JSON line names the file, the line and the column;
* lines are read one at a time, so a training corpus of any size streams.

And the one check every verb that takes a model or tokenizer runs around loading it (:func:`model_source`,
:func:`check_model_source`): a name that is neither a local path nor on the Hugging Face Hub is reported as such —
no such local directory, and for a possible Hub id that it was looked up on the Hub and what the Hub answered —
instead of as a Hub error about repo id syntax.

This module imports nothing else from the package.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import json
import os
import re
from collections.abc import Iterator
from typing import Any


class DataFileError(ValueError):
    """A data file that cannot be read as its format says (the message names the file and the line)."""


def _decode(raw: bytes, path, lineno: int, offset: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        bad = raw[e.start:e.start + 4]
        raise DataFileError(
            f"{path}, line {lineno} (byte offset {offset + e.start}): not UTF-8 text (bytes {bad!r}); "
            "convert the file to UTF-8 (e.g. iconv -f latin1 -t utf-8)"
        ) from None


_HASHES: dict[tuple, str] = {}


def content_hash(path: str | os.PathLike) -> str:
    """SHA-256 of a file's bytes, or of a directory's files (relative names and bytes, in sorted order).
    Cached per process by (path, size, modification time), so many cells over the same data hash it once."""
    root = os.fspath(path)
    paths = [root] if os.path.isfile(root) else sorted(
        os.path.join(d, f) for d, _, names in os.walk(root) for f in names)
    key = tuple((p, os.stat(p).st_size, os.stat(p).st_mtime_ns) for p in paths)
    if key not in _HASHES:
        h = hashlib.sha256()
        for p in paths:
            h.update(os.path.relpath(p, root).encode() + b"\0")
            _feed(h, p)
        _HASHES[key] = h.hexdigest()
    return _HASHES[key]


def sha256_of_file(path: str | os.PathLike) -> str:
    """SHA-256 of a file's bytes (hex, as ``sha256sum`` prints it), never cached: for integrity checks."""
    return _feed(hashlib.sha256(), path).hexdigest()


def _feed(h, path):
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h


def check_file(path: str | os.PathLike) -> None:
    if not os.path.isfile(path):
        raise FileNotFoundError(f"data file not found: {path}")


#: What a Hugging Face Hub repository id can look like: ``name`` or ``namespace/name``.
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


def _hub_offline() -> bool:
    """Whether the Hub is off limits: ``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE`` as huggingface_hub read them
    at import, or as set since."""
    from huggingface_hub import constants

    variables = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    return bool(constants.HF_HUB_OFFLINE) or any(os.environ.get(v, "").upper() in ("1", "ON", "YES", "TRUE")
                                                 for v in variables)


def check_model_source(name_or_path: str | os.PathLike, what: str = "model", *, local_files_only: bool = False) -> None:
    """Refuse at once, without asking the Hub, a model (or tokenizer: ``what``) that is not a local path and that
    the Hugging Face Hub cannot serve, saying where it was looked for and why it was not found there:

    * a name that cannot be a Hub id (``./runs/x``, ``/data/model``): no such local directory;
    * a possible Hub id (``org/name``; also a relative path such as ``runs/x`` that does not exist here) while the
      Hub is offline (``HF_HUB_OFFLINE``) or with ``local_files_only``: no such local directory, and not in the
      local Hub cache.

    Otherwise it returns and the loader goes ahead; :func:`model_source` words the Hub's answer if loading fails."""
    name = os.fspath(name_or_path)
    if os.path.exists(name):
        return
    where = f"{what} not found: {name!r} is not an existing local path (no such directory)"
    if not _HUB_ID.match(name) or "--" in name or ".." in name:
        raise FileNotFoundError(f"{where}, and it cannot be a Hugging Face Hub id (those read 'name' or "
                                "'namespace/name')")
    if not (_hub_offline() or local_files_only):
        return
    import huggingface_hub
    from huggingface_hub import constants

    cache = os.path.join(constants.HF_HUB_CACHE, huggingface_hub.file_download.repo_folder_name(
        repo_id=name, repo_type="model"), "snapshots")
    if os.path.isdir(cache) and any(os.scandir(cache)):
        return
    why = ("the Hub is offline (HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE)" if _hub_offline()
           else "only local files were asked for")
    raise FileNotFoundError(f"{where}; as a Hugging Face Hub id it is not in the local Hub cache "
                            f"({constants.HF_HUB_CACHE}), and {why}")


@contextlib.contextmanager
def model_source(name_or_path: str | os.PathLike, what: str = "model", *, local_files_only: bool = False):
    """:func:`check_model_source`, then the block that loads ``name_or_path``. When the block fails with an
    ``OSError`` (how transformers reports the Hub's answers: no such repository, unreachable, gated, a file
    missing) for a name that is not a local path, the error says so: no such local directory, and that the name
    was looked up on the Hub, followed by the Hub's answer."""
    check_model_source(name_or_path, what, local_files_only=local_files_only)
    try:
        yield
    except OSError as error:
        name = os.fspath(name_or_path)
        if os.path.exists(name):
            raise
        raise OSError(f"{what} {name!r} could not be loaded: it is not an existing local path (no such "
                      f"directory), and as a Hugging Face Hub id it was looked up on the Hub: {error}") from error


def iter_lines(path: str | os.PathLike) -> Iterator[tuple[int, str]]:
    """``(line number, line without its newline)`` for every line of a UTF-8 text file."""
    check_file(path)
    offset = 0
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            text = _decode(raw, path, lineno, offset)
            if lineno == 1:
                text = text.removeprefix("\ufeff")
            offset += len(raw)
            yield lineno, text.rstrip("\r\n")


def read_text(path: str | os.PathLike) -> str:
    """The whole file as text (UTF-8, checked line by line so an error names the line)."""
    return "\n".join(line for _, line in iter_lines(path))


def iter_jsonl(path: str | os.PathLike, *, objects: bool = True, skip_other_lines: bool = False
               ) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` for every non-blank line of a JSON-lines file; with ``objects`` each value must
    be a JSON object. ``skip_other_lines`` passes over lines that do not start with ``{`` (log lines captured
    with a results stream)."""
    for lineno, line in iter_lines(path):
        if not line.strip() or (skip_other_lines and not line.lstrip().startswith("{")):
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataFileError(f"{path}, line {lineno}, column {e.colno}: not valid JSON ({e.msg})") from None
        if objects and not isinstance(value, dict):
            raise DataFileError(f"{path}, line {lineno}: expected a JSON object, found {type(value).__name__}")
        yield lineno, value


def load_json(path: str | os.PathLike) -> Any:
    """One JSON document (a SQuAD file, a manifest)."""
    text = read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise DataFileError(f"{path}, line {e.lineno}, column {e.colno}: not valid JSON ({e.msg})") from None


def read_rows(path: str | os.PathLike, delimiter: str = "\t") -> list[tuple[int, dict[str, str]]]:
    """``(line number, row)`` of a delimited file with a header line. Every row must have the header's number of
    fields; quotes are literal text for tab-separated files (GLUE), CSV quoting for comma-separated ones."""
    lines = iter_lines(path)
    quoting = csv.QUOTE_MINIMAL if delimiter == "," else csv.QUOTE_NONE
    numbered = ((n, line) for n, line in lines)
    first = next(numbered, None)
    if first is None:
        raise DataFileError(f"{path}: empty file (expected a header line)")
    header = next(csv.reader([first[1]], delimiter=delimiter, quoting=quoting))
    sep = "tab" if delimiter == "\t" else repr(delimiter)
    rows = []
    for lineno, line in numbered:
        if not line.strip():
            continue
        fields = next(csv.reader([line], delimiter=delimiter, quoting=quoting))
        if len(fields) != len(header):
            raise DataFileError(
                f"{path}, line {lineno}: {len(fields)} {sep}-separated field(s) where the header {header} has "
                f"{len(header)}: {line[:120]!r}"
            )
        rows.append((lineno, dict(zip(header, fields, strict=True))))
    if not rows:
        raise DataFileError(f"{path}: no rows under the header {header}")
    return rows
