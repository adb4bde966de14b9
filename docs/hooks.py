"""MkDocs hooks: the files of the repository that the pages link to become part of the site.

The pages link repository files as a checkout (or GitHub) holds them, relative to the page: a benchmark's record,
``../benchmarks/serve/README.md``; a script, ``../examples/embed_and_search.py``. MkDocs only knows ``docs/``, so
this hook adds every such file to the site under ``repo/`` (a Markdown file as a page, anything else as it is),
follows the links of the Markdown files it adds, and rewrites each link to the file's place in the site. A link to a
file that does not exist stops the build (``mkdocs build --strict`` runs in the test suite), as does one that leaves
the repository. A link to a folder goes to its ``README.md``.

It also writes the command-line reference, ``reference/cli/``: one page per verb, generated from the verbs' parsers
(``docs/cli_reference.py``), so that it lists exactly what ``avey-b VERB --help`` accepts.
"""

from __future__ import annotations

import posixpath
import re
import sys
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File
from routes_page import add_page as add_routes_page  # docs/ is on sys.path while MkDocs loads a hook

REPOSITORY = Path(__file__).resolve().parents[1]
if str(REPOSITORY) not in sys.path:  # the checkout's avey_b, whose parsers the reference reads
    sys.path.insert(0, str(REPOSITORY))
import cli_reference  # noqa: E402  (beside this file: mkdocs puts its folder on sys.path while it loads the hook)

PREFIX = "repo"  # where repository files appear in the site
LINK = re.compile(r"(\]\()([^)\s]+)(\))")  # [text](target) and ![alt](target)
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)  # links inside code blocks are code, not links


def _targets(markdown: str):
    """The link targets of ``markdown`` outside its code blocks, with their match objects."""
    prose = FENCE.sub(lambda m: " " * len(m.group(0)), markdown)
    for match in LINK.finditer(prose):
        target = match.group(2)
        if "://" in target or target.startswith(("mailto:", "#", "/")):
            continue
        yield match, target


def _resolve(source: Path, target: str, docs: Path) -> tuple[Path, str] | None:
    """(file, anchor) a link of ``source`` points at, when that file lies outside ``docs``; None when inside."""
    path_part, _, anchor = target.partition("#")
    path = (source.parent / path_part).resolve()
    if path.is_relative_to(docs) and source.resolve().is_relative_to(docs):
        return None  # MkDocs checks links between pages itself
    if not path.is_relative_to(REPOSITORY):
        raise PluginError(f"{source}: the link {target!r} leaves the repository")
    if path.is_dir():
        path = path / "README.md"
    if not path.is_file():
        raise PluginError(f"{source}: the link {target!r} points at {path}, which does not exist")
    return path, anchor


def _site_uri(path: Path, docs: Path) -> str:
    if path.is_relative_to(docs):
        return path.relative_to(docs).as_posix()
    return f"{PREFIX}/{path.relative_to(REPOSITORY).as_posix()}"


def on_files(files, config):
    docs = Path(config.docs_dir).resolve()
    added: set[str] = set()
    queue = [Path(f.abs_src_path) for f in files if f.src_uri.endswith(".md")]
    while queue:
        source = queue.pop()
        for _, target in _targets(source.read_text(encoding="utf-8")):
            found = _resolve(source, target, docs)
            if found is None or found[0].is_relative_to(docs):
                continue
            uri = _site_uri(found[0], docs)
            if uri in added:
                continue
            added.add(uri)
            files.append(File.generated(config, uri, abs_src_path=str(found[0])))
            if found[0].suffix == ".md":
                queue.append(found[0])
    for uri, content in cli_reference.pages().items():
        files.append(File.generated(config, uri, content=content))
    return add_routes_page(files, config)


def on_page_markdown(markdown, page, config, files):
    docs = Path(config.docs_dir).resolve()
    source = Path(page.file.abs_src_path or docs / page.file.src_uri)  # a generated page has no source file
    here = posixpath.dirname(page.file.src_uri)
    edits = []
    for match, target in _targets(markdown):
        found = _resolve(source, target, docs)
        if found is None:
            continue
        path, anchor = found
        new = posixpath.relpath(_site_uri(path, docs), here or ".") + (f"#{anchor}" if anchor else "")
        edits.append((match.start(2), match.end(2), new))
    for start, end, new in reversed(edits):
        markdown = markdown[:start] + new + markdown[end:]
    return markdown
