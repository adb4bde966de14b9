"""Shared fixtures: a tiny Avey-B in the style of transformers' ModelTester (d=32, L=2, S=4, k=2, V=99, N=13,
so N is not a multiple of S). Everything is offline and CPU-only."""

import pytest
import torch

import avey_b  # noqa: F401  (registers the Auto classes)
from avey_b.model import presets

VOCAB, SEQ = 99, 13


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
