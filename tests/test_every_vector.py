"""One forward, any subset of the vectors a checkpoint gives (``Encoder.vectors``): each output equals the one its
own method computes, the padding of a batch changes none, and an output the checkpoint lacks is refused by name."""

import pytest
import torch

from avey_b import AveyBForMultiVector
from avey_b import testing as toy
from avey_b.inference.encoder import Encoder
from avey_b.inference.options import OUTPUTS, LoadOptions
from avey_b.model import presets
from avey_b.testing import seeded

TEXTS = ["a good film", "the plot was awful and the cast was weak", "bob met alice in paris " * 12]


def load(directory) -> Encoder:
    return Encoder(directory, LoadOptions(device="cpu", precision="fp32")).load()


@pytest.fixture(scope="module")
def masked_lm(tmp_path_factory):
    directory = tmp_path_factory.mktemp("mlm")
    return load(toy.avey_b(str(directory), toy.tokenizer(str(directory))))


@pytest.fixture(scope="module")
def multi_vector(tmp_path_factory):
    directory = tmp_path_factory.mktemp("multivector")
    tok = toy.tokenizer(str(directory))
    seeded(AveyBForMultiVector, presets.tiny(vocab_size=len(tok), multivector_dim=16)).save_pretrained(directory)
    return load(directory)


def test_one_pass_gives_what_each_outputs_own_method_gives(masked_lm, multi_vector):
    assert masked_lm.vector_outputs == ["dense", "sparse"] and multi_vector.vector_outputs == ["dense", "multivector"]
    for encoder in (masked_lm, multi_vector):
        batch, mask = encoder.pad(encoder.tokenize(TEXTS)["input_ids"])
        got = encoder.vectors(batch, mask, encoder.vector_outputs)
        assert set(got) == set(encoder.vector_outputs) and all(len(v) == len(TEXTS) for v in got.values())
        torch.testing.assert_close(torch.stack(got["dense"]), encoder.embed(batch, mask).cpu(), rtol=0, atol=1e-6)
        if "sparse" in got:
            for (i, v), (i2, v2) in zip(got["sparse"], encoder.sparse(batch, mask), strict=True):
                assert i.tolist() == i2.tolist()
                torch.testing.assert_close(v, v2, rtol=0, atol=1e-6)
        if "multivector" in got:
            for v, v2 in zip(got["multivector"], encoder.multivectors(TEXTS), strict=True):
                torch.testing.assert_close(v, v2, rtol=0, atol=1e-6)


def test_a_row_padded_in_a_batch_gets_the_vectors_it_gets_alone(masked_lm):
    ids = masked_lm.tokenize(TEXTS)["input_ids"]
    batch, mask = masked_lm.pad(ids)
    together = masked_lm.vectors(batch, mask, ("dense", "sparse"))
    alone = masked_lm.vectors(*masked_lm.pad(ids[:1]), ("dense", "sparse"))
    torch.testing.assert_close(together["dense"][0], alone["dense"][0], rtol=0, atol=1e-5)
    dense = lambda row: torch.zeros(masked_lm.config.vocab_size).index_put_((row[0],), row[1])  # noqa: E731
    torch.testing.assert_close(dense(together["sparse"][0]), dense(alone["sparse"][0]), rtol=0, atol=1e-5)


def test_an_output_the_checkpoint_lacks_is_refused_by_name(masked_lm, multi_vector):
    batch, mask = masked_lm.pad(masked_lm.tokenize(TEXTS[:1])["input_ids"])
    with pytest.raises(ValueError, match=r"without a multi-vector head.*--task multi-vector"):
        masked_lm.vectors(batch, mask, ("dense", "multivector"))
    with pytest.raises(ValueError, match=r"no masked-LM head.*--task sparse-embedding"):
        multi_vector.vectors(batch, mask, ("sparse",))
    with pytest.raises(ValueError, match=r"unknown outputs \['colbert'\]: the outputs are " + ", ".join(OUTPUTS)):
        masked_lm.vectors(batch, mask, ("colbert",))
