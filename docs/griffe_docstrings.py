"""A griffe extension (``mkdocs.yml``: the Python handler's ``extensions``) that makes the package's docstrings
render on the site as they read in a terminal.

The docstrings are Google style (``Args:`` / ``Returns:``; the site parses them as such) with Sphinx's inline
markup, written for ``help()`` and for transformers' conventions. When griffe loads a docstring, this rewrites:

* the reST roles ``:class:`avey_b.x.Y``` (and ``:func:``, ``:mod:``, ``:meth:``, ``:data:``, ``:attr:``,
  ``:exc:``, ``:obj:``; ``~`` shows the last name only) into a cross-reference to the object's page where the
  reference documents it, code elsewhere (an optional autorefs reference); double backticks into Markdown code;
* an ``Args:`` entry in transformers' form, ``name (`int`, defaults to 3): ...``, into Google's ``name (int):
  ...`` (the default is the signature's), so that the parameters render as a table.
"""

from __future__ import annotations

import html
import re

import griffe

ROLE = re.compile(r":(?:class|func|mod|meth|data|attr|exc|obj):`(~?)([^`]+)`")
DOUBLE = re.compile(r"``(.+?)``", re.S)
SECTION = re.compile(r"^(Args|Arguments|Parameters):[ \t]*$", re.M)
ENTRY = re.compile(r"^(?P<name>\w+)(?: \((?P<type>[^)]*(?:\([^)]*\)[^)]*)*)\))?:(?P<rest>\s.*)?$")


def _reference(match: re.Match, where: str) -> str:
    short, name = match.group(1), match.group(2).strip()
    title = name.rpartition(".")[2] if short else name
    identifier = name if name.startswith("avey_b.") else f"{where}.{name}"
    return (f'<autoref identifier="{html.escape(identifier)}" optional>'
            f"<code>{html.escape(title)}</code></autoref>")


def markdown(text: str, where: str) -> str:
    """``text`` with its reST roles and double backticks as Markdown (``where``: the module that names resolve in)."""
    text = ROLE.sub(lambda m: _reference(m, where), text)
    return DOUBLE.sub(lambda m: f"`{m.group(1)}`", text)


def _type(text: str | None) -> str:
    """The type of a transformers-style annotation: ``\\`int\\`, defaults to 3`` -> ``int``."""
    if not text:
        return ""
    first = text.split(",")[0].strip().strip("`*")
    return "" if first in ("optional", "") else first


def google_args(text: str) -> str:
    """``text`` with each ``Args:`` entry in Google's ``name (type): description`` form."""
    out, inside = [], False
    for line in text.splitlines():
        if SECTION.match(line):
            inside = True
        elif inside and line and not line.startswith(" "):
            inside = False
        match = ENTRY.match(line[4:]) if inside and line.startswith("    ") and line[4:5] != " " else None
        if match:
            typ = _type(match.group("type"))
            line = f"    {match.group('name')}{f' ({typ})' if typ else ''}:{match.group('rest') or ''}"
        out.append(line)
    return "\n".join(out)


class Docstrings(griffe.Extension):
    """Rewrites every docstring as it is loaded (:func:`markdown`, :func:`google_args`)."""

    def on_object(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            where = obj.path if obj.is_module else obj.module.path
            obj.docstring.value = google_args(markdown(obj.docstring.value, where))
