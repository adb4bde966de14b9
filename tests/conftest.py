"""Shared fixtures: a tiny Avey-B in the style of transformers' ModelTester (d=32, L=2, S=4, k=2, V=99, N=13,
so N is not a multiple of S). Everything is offline and CPU-only."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import avey_b  # noqa: F401  (registers the Auto classes)
from avey_b.model import presets

VOCAB, SEQ = 99, 13


def _failed_for_a_missing_package(report) -> None:
    """With ``CI`` set, a test (or module) skipped because a package is not installed (``pytest.importorskip``'s
    "could not import") fails instead: every package the tests use belongs in the ``dev`` extra, and a skip there
    would hide a missing install step. Other skips (no Chromium, no GPU) stay skips; ``.ci/run`` lists them
    (``-rs``)."""
    if not os.environ.get("CI") or not report.skipped or not isinstance(report.longrepr, tuple):
        return
    reason = str(report.longrepr[2])
    if "could not import" in reason:
        report.outcome = "failed"
        report.longrepr = (f"{reason}\n-- a test skipped for a missing package fails in CI (CI is set): put the "
                           "package in the dev extra of pyproject.toml")


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    report = yield
    _failed_for_a_missing_package(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    _failed_for_a_missing_package(report)
    return report


@pytest.fixture
def ids():
    g = torch.Generator().manual_seed(0)
    return torch.randint(1, VOCAB, (3, SEQ), generator=g)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A saved tiny sentence-embedding Avey-B (the tiny config, seeded) with the toy tokenizer: one per test
    module, for the tests that load a model directory (embed, serve threads)."""
    from avey_b import AveyBForSentenceEmbedding
    from avey_b import testing as toy
    from avey_b.testing import seeded

    directory = tmp_path_factory.mktemp("model")
    tok = toy.tokenizer(str(directory))
    seeded(AveyBForSentenceEmbedding, presets.tiny(vocab_size=len(tok))).save_pretrained(directory)
    return directory


@pytest.fixture(scope="session")
def built_site(tmp_path_factory) -> Path:
    """The documentation site, built once per test session with ``mkdocs build --strict`` (a warning fails it):
    the directory of the built site, for every test that reads it."""
    root = Path(__file__).resolve().parents[1]
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent)) or shutil.which("mkdocs")
    assert mkdocs, "mkdocs is part of the dev install: pip install -e '.[dev]'"
    site = tmp_path_factory.mktemp("site") / "site"
    run = subprocess.run([mkdocs, "build", "--strict", "--site-dir", str(site)], cwd=root, capture_output=True,
                         text=True, timeout=600, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert run.returncode == 0, "mkdocs build --strict failed:\n" + run.stdout[-3000:] + run.stderr[-5000:]
    return site


@pytest.fixture(scope="session")
def reference_copy():
    """``reference_copy(name)``: the directory of a reference copy outside the project (``../shared/reference/NAME``
    beside the checkout, or under ``$AVEY_B_REFERENCE``: the authors' release, the EncodEval harness), read for facts
    only; a test that needs one is skipped, saying so, where it is absent."""
    root = Path(os.environ.get("AVEY_B_REFERENCE") or Path(__file__).resolve().parents[2] / "shared" / "reference")

    def find(name: str) -> Path:
        directory = root / name
        if not directory.is_dir():
            pytest.skip(f"no reference copy {directory} (set AVEY_B_REFERENCE to the folder holding {name}/)")
        return directory

    return find
