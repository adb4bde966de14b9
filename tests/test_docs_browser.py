"""The site as a reader sees it: built with ``mkdocs build --strict``, served on loopback, and every page loaded in
a real headless Chromium (Playwright) with the network closed.

* every page (each ``.html`` file of the build, the repository files the hook adds under ``repo/`` included)
  answers 200 and loads with no console error and no uncaught exception;
* no request leaves 127.0.0.1 (each is aborted and recorded): the site works offline, no font or script from a CDN;
* every internal link resolves to a file of the site and every ``#anchor`` is an id on its target page (checked on
  the built HTML, :func:`broken_links`);
* the search index has an entry for every page, and the search box finds a word;
* full-page screenshots of the home page and of a tutorial go to ``$AVEY_B_DOCS_ARTIFACTS`` (``.ci/docs`` keeps
  them), else to the test's temporary directory.

Chromium is ``$AVEY_B_CHROMIUM``, else Playwright's own (``playwright install chromium``), else
``/usr/bin/chromium`` (Debian: ``apt-get install chromium``); without one the browser tests are skipped.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from dataclasses import dataclass, field
from functools import partial
from html.parser import HTMLParser
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

import pytest

#: Flags that let Chromium run as root, offline, without reaching for its own services.
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
DEBIAN_CHROMIUM = "/usr/bin/chromium"  # apt-get install chromium
LINKING = {"a": "href", "link": "href", "area": "href", "img": "src", "script": "src", "source": "src",
           "iframe": "src", "video": "src", "audio": "src"}


class _Html(HTMLParser):
    """The ids (and ``<a name>``s) of one HTML file and the URLs it links or loads."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        values = dict(attrs)
        if values.get("id"):
            self.ids.add(values["id"])
        if tag == "a" and values.get("name"):
            self.ids.add(values["name"])
        if tag in LINKING and values.get(LINKING[tag]):
            self.links.append(values[LINKING[tag]])


def _parsed(path: Path) -> _Html:
    parser = _Html()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser


def _target(site: Path, path: str) -> Path:
    """The file of ``site`` that serves the URL path ``path`` (a folder serves its ``index.html``)."""
    file = site / unquote(path).lstrip("/")
    return file / "index.html" if path.endswith("/") or file.is_dir() else file


def broken_links(site: Path) -> list[str]:
    """Every internal link or resource of the site's HTML that names no file of the site, and every ``#anchor``
    that is no id of its target page, as ``"page: link (what is wrong)"``. A link with a scheme or a host
    (``https://``, ``mailto:``) is not internal; the browser test records anything requested off loopback."""
    pages = {file: _parsed(file) for file in sorted(site.rglob("*.html"))}
    problems = []
    for file, page in pages.items():
        here = "/" + file.relative_to(site).as_posix()
        for link in page.links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc:
                continue
            target = _target(site, urljoin(here, parts.path)) if parts.path else file
            name = f"{file.relative_to(site).as_posix()}: {link}"
            if not target.is_file():
                problems.append(f"{name} (no file {target.relative_to(site).as_posix()})")
            elif parts.fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else _parsed(target).ids
                if unquote(parts.fragment) not in ids:
                    problems.append(f"{name} (no id {unquote(parts.fragment)!r} on that page)")
    return problems


def test_the_link_checker_catches_a_missing_page_and_a_missing_anchor(tmp_path):
    (tmp_path / "guide").mkdir()
    (tmp_path / "index.html").write_text(
        '<h1 id="top">Home</h1><a href="guide/#install">ok</a> <a href="guide/#nowhere">anchor</a> '
        '<a href="gone/">page</a> <a href="#top">here</a> <a href="#bottom">here, missing</a> '
        '<a href="https://example.org/#x">away</a> <img src="logo.png">', encoding="utf-8")
    (tmp_path / "guide" / "index.html").write_text(
        '<h2 id="install">Install</h2><a href="../">home</a> <a href="../index.html#top">top</a> '
        '<a href="/index.html#top">root</a> <a href="../guide/#install">self</a>', encoding="utf-8")
    assert broken_links(tmp_path) == [
        "index.html: guide/#nowhere (no id 'nowhere' on that page)",
        "index.html: gone/ (no file gone/index.html)",
        "index.html: #bottom (no id 'bottom' on that page)",
        "index.html: logo.png (no file logo.png)",
    ]
    (tmp_path / "logo.png").write_bytes(b"")
    (tmp_path / "index.html").write_text('<a id="top" href="guide/#install">ok</a>', encoding="utf-8")
    assert broken_links(tmp_path) == []


def _pages(site: Path) -> list[str]:
    """The URL path of every page of the site, as a reader's address bar shows it (``guide/``, not
    ``guide/index.html``)."""
    paths = [file.relative_to(site).as_posix() for file in sorted(site.rglob("*.html"))]
    return sorted(path.removesuffix("index.html") for path in paths)


@pytest.mark.slow
def test_every_internal_link_and_anchor_resolves(built_site):
    assert broken_links(built_site) == []


@pytest.mark.slow
def test_the_search_index_has_every_page(built_site):
    index = json.loads((built_site / "search" / "search_index.json").read_text(encoding="utf-8"))
    indexed = {entry["location"].partition("#")[0] for entry in index["docs"]}
    assert [page for page in _pages(built_site) if page not in indexed and page != "404.html"] == []


def _chromium(playwright) -> str | None:
    """``$AVEY_B_CHROMIUM``, else Playwright's own Chromium, else Debian's; None when none is installed."""
    for path in (os.environ.get("AVEY_B_CHROMIUM"), playwright.chromium.executable_path, DEBIAN_CHROMIUM):
        if path and Path(path).is_file():
            return path
    return None


def test_chromium_is_the_one_named_else_playwrights_else_debians(tmp_path, monkeypatch):
    from types import SimpleNamespace

    named, own, debian = (tmp_path / name for name in ("named", "own", "debian"))
    playwright = SimpleNamespace(chromium=SimpleNamespace(executable_path=str(own)))
    monkeypatch.setattr(sys.modules[__name__], "DEBIAN_CHROMIUM", str(debian))
    monkeypatch.setenv("AVEY_B_CHROMIUM", str(named))
    assert _chromium(playwright) is None  # none installed: the browser tests are skipped
    for path, found in ((debian, debian), (own, own), (named, named)):
        path.write_bytes(b"")
        assert _chromium(playwright) == str(found)


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002  (the name http.server gives it)
        pass


@dataclass
class Reading:
    """What the browser saw: the open page (for the search box and the screenshots), the site's address, and
    every problem as ``"url: what"``."""

    page: object
    base: str
    statuses: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    offsite: list[str] = field(default_factory=list)
    cut: list[str] = field(default_factory=list)


def _watch(page, reading: Reading) -> None:
    def route(route):
        parts = urlsplit(route.request.url)
        if parts.scheme in ("http", "https") and parts.hostname != "127.0.0.1":
            reading.offsite.append(f"{page.url}: {route.request.url}")
            route.abort()
        else:
            route.continue_()

    def response(answer):
        if answer.status >= 400:
            reading.errors.append(f"{page.url}: HTTP {answer.status} for {answer.url}")

    page.route("**/*", route)
    page.on("console", lambda m: m.type == "error" and reading.errors.append(f"{page.url}: console: {m.text}"))
    page.on("pageerror", lambda error: reading.errors.append(f"{page.url}: uncaught: {error}"))
    page.on("response", response)


#: The first characters of each code block whose lines run past its box (hidden behind a scroll bar).
HIDDEN_CODE = """() => [...document.querySelectorAll("pre > code")]
    .filter(code => code.scrollWidth > code.clientWidth + 1).map(code => code.textContent.slice(0, 60))"""


@pytest.fixture(scope="module")
def reading(built_site):
    """Serve the site on a free loopback port and load every page once in one headless Chromium page."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright comes with the dev extra: .[dev]")
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(built_site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with sync_api.sync_playwright() as playwright:
            executable = _chromium(playwright)
            if executable is None:
                pytest.skip("no Chromium: apt-get install chromium (Debian), or playwright install chromium, "
                            "or set AVEY_B_CHROMIUM to a Chromium binary")
            browser = playwright.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_FLAGS)
            page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
            found = Reading(page, f"http://127.0.0.1:{server.server_address[1]}/")
            _watch(page, found)
            for path in _pages(built_site):
                answer = page.goto(found.base + path, wait_until="load")
                found.statuses[path] = answer.status if answer else 0
                found.cut += [f"{path}: {line}" for line in page.evaluate(HIDDEN_CODE)]
            page.wait_for_load_state("networkidle")
            yield found
            browser.close()
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.slow
def test_every_page_loads_without_errors(reading, built_site):
    assert len(reading.statuses) == len(_pages(built_site)) > 1
    assert {path: status for path, status in reading.statuses.items() if status != 200} == {}
    assert reading.errors == []


@pytest.mark.slow
def test_no_code_block_hides_its_lines_at_the_readers_width(reading):
    """At 1280 px every line of every code block is in view (they wrap: docs/stylesheets/extra.css)."""
    assert reading.cut == []


@pytest.mark.slow
def test_nothing_is_requested_off_loopback(reading):
    assert reading.offsite == []


@pytest.mark.slow
def test_the_search_box_finds_a_word(reading):
    page = reading.page
    page.goto(reading.base, wait_until="load")
    page.locator("input.md-search__input").click()
    page.locator("input.md-search__input").press_sequentially("encoder")
    results = page.locator(".md-search-result__item")
    results.first.wait_for(state="visible", timeout=20_000)
    assert results.count() > 0
    assert "encoder" in results.first.inner_text().lower()
    assert reading.errors == [] and reading.offsite == []


def _tutorial(site: Path) -> str:
    """The tutorial a screenshot shows: the first hour's, else the first page under ``tutorials/``, else getting
    started."""
    tutorials = [page for page in _pages(site) if page.startswith("tutorials/")]
    if "tutorials/first-hour/" in tutorials:
        return "tutorials/first-hour/"
    return tutorials[0] if tutorials else "getting-started/"


@pytest.mark.slow
def test_screenshots_of_the_home_page_and_a_tutorial(reading, built_site, tmp_path):
    folder = Path(os.environ.get("AVEY_B_DOCS_ARTIFACTS") or tmp_path / "docs-artifacts")
    folder.mkdir(parents=True, exist_ok=True)
    for name, path in (("home", ""), ("tutorial", _tutorial(built_site))):
        reading.page.goto(reading.base + path, wait_until="networkidle")
        shot = folder / f"{name}.png"
        reading.page.screenshot(path=str(shot), full_page=True)
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    assert reading.errors == [] and reading.offsite == []
