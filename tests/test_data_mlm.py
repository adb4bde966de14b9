"""Masking (paper appendix "Pretraining Methodology"): statistics, exclusions, the 80/10/10 option and
reproducibility."""

import pytest
import torch

from avey_b.data.mlm import IGNORE_INDEX, mask_tokens, sequence_generator

MASK, PAD, CLS, SEP, EOT = 4, 0, 2, 3, 5
SPECIALS = [PAD, CLS, SEP, EOT]


def _ids(n=200_000, vocab=1000, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(6, vocab, (n,), generator=g)
    ids[::50] = EOT  # sprinkle specials among the text
    ids[::97] = CLS
    return ids


def test_default_masks_rate_share_all_with_mask_id():
    ids = _ids()
    inputs, labels = mask_tokens(ids, 0.2, MASK, SPECIALS, torch.Generator().manual_seed(1))
    selected = labels != IGNORE_INDEX
    maskable = ~torch.isin(ids, torch.tensor(SPECIALS))
    rate = selected.sum().item() / maskable.sum().item()
    assert abs(rate - 0.2) < 0.005  # ~200k draws: std of the share is ~0.001
    assert torch.equal(inputs[selected], torch.full_like(inputs[selected], MASK))  # every selected -> [MASK]
    assert torch.equal(inputs[~selected], ids[~selected])  # nothing else changes
    assert torch.equal(labels[selected], ids[selected])  # labels are the originals


def test_specials_and_padding_never_masked():
    ids = _ids(50_000)
    att = torch.ones_like(ids)
    att[-5000:] = 0
    inputs, labels = mask_tokens(ids, 1.0, MASK, SPECIALS, torch.Generator().manual_seed(0), attention_mask=att)
    special = torch.isin(ids, torch.tensor(SPECIALS))
    assert (labels[special] == IGNORE_INDEX).all()
    assert torch.equal(inputs[special], ids[special])
    assert (labels[-5000:] == IGNORE_INDEX).all()
    # rate 1.0 selects every other real token
    assert (labels[:-5000][~special[:-5000]] != IGNORE_INDEX).all()


def test_80_10_10_proportions_and_random_tokens_are_not_special():
    ids = _ids()
    inputs, labels = mask_tokens(ids, 0.3, MASK, SPECIALS, torch.Generator().manual_seed(3), scheme="80-10-10",
                                 vocab_size=1000)
    sel = labels != IGNORE_INDEX
    n = sel.sum().item()
    to_mask = (inputs[sel] == MASK).sum().item() / n
    unchanged = (inputs[sel] == ids[sel]).sum().item() / n
    assert abs(to_mask - 0.8) < 0.01
    # 10% kept + the few random draws that hit the original token
    assert 0.09 < unchanged < 0.115
    replaced = sel & (inputs != MASK) & (inputs != ids)
    assert not torch.isin(inputs[replaced], torch.tensor(SPECIALS + [MASK])).any()


def test_same_generator_same_mask_and_keyed_generators_differ():
    ids = _ids(10_000)
    a = mask_tokens(ids, 0.2, MASK, SPECIALS, sequence_generator(0, 17))
    b = mask_tokens(ids, 0.2, MASK, SPECIALS, sequence_generator(0, 17))
    c = mask_tokens(ids, 0.2, MASK, SPECIALS, sequence_generator(0, 18))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[1], c[1])


def test_bad_arguments_fail_clearly():
    ids = _ids(100)
    with pytest.raises(ValueError, match="rate"):
        mask_tokens(ids, 1.5, MASK, SPECIALS)
    with pytest.raises(ValueError, match="scheme"):
        mask_tokens(ids, 0.2, MASK, SPECIALS, scheme="bert")
    with pytest.raises(ValueError, match="vocab_size"):
        mask_tokens(ids, 0.2, MASK, SPECIALS, scheme="80-10-10")
