"""The manual cannot rot: the documentation site builds with ``mkdocs build --strict`` (a broken link, a missing
page or an API reference to a name that does not exist fails it), and every Python block of the README and of
``docs/`` runs (but the tutorials': ``docs/tutorials/`` pages run top to bottom, in order, in test_tutorials.py).

Each block runs in its own process, in a scratch directory, with what it names made small and local:

* Hub ids (the authors' checkpoint and tokenizer) and ``runs/quickstart/model`` become a tiny Avey-B saved here
  (random weights, the toy tokenizer), so no block downloads anything; ``reviews.csv``, a small CSV of labelled
  sentences;
* ``presets.base(`` becomes ``presets.tiny(`` (the same code path at test size);
* ``http://127.0.0.1:8000`` becomes a server started here on a free port (``avey-b serve`` on the tiny model).

The table :data:`SMALL` is the whole list: a block that needs anything else must be written so that it runs.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from avey_b import testing as toy

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted(page for page in (ROOT / "docs").rglob("*.md")
                                      if (ROOT / "docs" / "tutorials") not in page.parents)]
FENCE = re.compile(r"^```python\n(.*?)^```", re.M | re.S)

#: What a block names, and what it runs with here (``{model}``, ``{tokenizer}``, ``{url}``: made by the fixtures).
SMALL = {
    '"avey-ai/avey-b1-base-exp"': '"{model}"',
    '"avey-ai/avey1-tokenizer-base", vocab_size=50368': '"{tokenizer}"',
    '"runs/quickstart/model"': '"{model}"',
    '"reviews.csv"': '"{reviews}"',
    "presets.base(": "presets.tiny(",
    "http://127.0.0.1:8000": "{url}",
}


def python_blocks() -> list[tuple[str, str]]:
    """(``file:line``, code) of every ```` ```python ```` block of the README and the docs, each block once."""
    found, seen = [], set()
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            code = match.group(1)
            if code in seen:
                continue
            seen.add(code)
            line = text[:match.start()].count("\n") + 1
            found.append((f"{page.relative_to(ROOT)}:{line}", code))
    return found


BLOCKS = python_blocks()


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """The tiny model, its tokenizer, and a server on it (started on first use)."""
    root = tmp_path_factory.mktemp("docs")
    model = root / "model"
    tok = toy.tokenizer(str(model))
    toy.avey_b(str(model), tok)
    reviews = root / "reviews.csv"  # a CSV with string labels, as the fine-tuning page's example reads
    reviews.write_text("review,sentiment\n" + "".join(f"the film was {word},{label}\n" for _ in range(20)
                                                        for word, label in (("lovely", "positive"),
                                                                            ("awful", "negative"))))
    values = {"model": str(model), "tokenizer": str(model), "reviews": str(reviews)}
    server = {}

    def url() -> str:
        if "url" not in server:
            from test_serve import start

            server["proc"], server["url"] = start(model)
        return server["url"]

    yield values, url
    if "proc" in server:
        from test_serve import stop

        stop(server["proc"])


def smallened(code: str, values: dict, url) -> str:
    for name, replacement in SMALL.items():
        if name in code:
            if "{url}" in replacement:
                replacement = replacement.replace("{url}", url())
            code = code.replace(name, replacement.format(**values))
    return code


@pytest.mark.slow
@pytest.mark.parametrize("where,code", BLOCKS, ids=[where for where, _ in BLOCKS])
def test_every_python_block_runs(where, code, small, tmp_path):
    values, url = small
    script = tmp_path / "block.py"
    script.write_text(smallened(code, values, url), encoding="utf-8")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, f"the block at {where} failed:\n{run.stdout[-2000:]}\n{run.stderr[-4000:]}"


def test_the_pages_have_python_blocks_and_the_table_is_used():
    """The block list is not empty and every entry of :data:`SMALL` still occurs in some block (a stale entry
    would hide a block that now downloads or needs a server of its own)."""
    assert len(BLOCKS) >= 3
    every = "\n".join(code for _, code in BLOCKS)
    assert [name for name in SMALL if name not in every] == []


@pytest.mark.slow
def test_the_site_builds_strictly(built_site):
    assert (built_site / "api" / "model" / "index.html").is_file()


def test_a_link_to_a_missing_repository_file_stops_the_build(tmp_path):
    """The hook that puts linked repository files into the site refuses a link to a file that does not exist and
    a link that leaves the repository (strict builds then fail on them)."""
    sys.path.insert(0, str(ROOT / "docs"))
    try:
        import hooks
    finally:
        sys.path.remove(str(ROOT / "docs"))
    from mkdocs.exceptions import PluginError

    page = ROOT / "docs" / "index.md"
    with pytest.raises(PluginError, match="does not exist"):
        hooks._resolve(page, "../benchmarks/no_such_benchmark/README.md", ROOT / "docs")
    with pytest.raises(PluginError, match="leaves the repository"):
        hooks._resolve(page, "../../outside.md", ROOT / "docs")
    found = hooks._resolve(page, "../benchmarks/serve/#what-it-shows", ROOT / "docs")
    assert found == (ROOT / "benchmarks" / "serve" / "README.md", "what-it-shows")
