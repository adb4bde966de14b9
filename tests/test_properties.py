"""The model's invariants, property-tested with hypothesis: inputs are generated (lengths from 1 token to several
processor chunks, batch sizes, padding anywhere — left, right, holes in between — both ranker paths, float32 and
bfloat16 autocast), not chosen.

* a real token's output does not depend on the padding around it nor on the other rows of its batch (each row of a
  padded batch equals the row run alone: 1e-5 in float32; under bfloat16 autocast a batch runs GEMMs of other
  shapes, whose bf16 rounding differs, so within 2% of the row's largest output);
* a document fed to :class:`~avey_b.model.streaming.DocumentState` in random pieces and edited at random (replace,
  truncate, update) gives the pooled vector of a fresh forward of its final ids (1e-5, the module's promise);
* the release converter's output is the release's tensors, bit for bit, and loads, saves and loads again to the same
  logits (exactly);
* slow lane: ``torch.compile`` equals eager, and the ONNX export equals eager, on generated inputs.

Ids come from a vocabulary of 2,000 (the tiny config's 99 repeats ids so often that exact MaxSim ties are common,
and a tie may be broken by a 1e-7 rounding difference: that is not a padding property). The tiny config runs with
a processor chunk of four splits (``processor_chunk_tokens=16``) and a ranker block of 8 tokens, so that a few dozen
tokens already cross chunks and blocks. One thread: the model is tiny, and threads only contend on a busy machine.

The fast lane runs a fixed, small number of examples, derandomized and without an example database (the same
examples on every run and machine: the ``ci`` profile); ``HYPOTHESIS_PROFILE=deep`` runs many more."""

from __future__ import annotations

import json
import os

import pytest
import torch

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from avey_b import AveyBForMaskedLM, AveyBModel  # noqa: E402
from avey_b.model import presets  # noqa: E402
from avey_b.model.heads import sentence_embedding  # noqa: E402
from avey_b.model.streaming import DocumentState  # noqa: E402

VOCAB, S, CHUNK = 2000, 4, 16
settings.register_profile("ci", max_examples=12, derandomize=True, database=None, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("deep", max_examples=400, derandomize=False, database=None, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
settings.load_profile(PROFILE)


def few(n: int):
    """A fast-lane example budget of ``n`` (compile and export cost seconds an example); the deep profile's own."""
    return settings(max_examples=n) if PROFILE == "ci" else settings()


_MODELS: dict = {}


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def model(algorithm: str = "dense") -> AveyBModel:
    """The tiny Avey-B with small processor chunks and ranker blocks (one per ranker path, built once)."""
    if algorithm not in _MODELS:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            _MODELS[algorithm] = AveyBModel(presets.tiny(
                vocab_size=VOCAB, processor_chunk_tokens=CHUNK, ranker_block_size=8, ranker_algorithm=algorithm,
                auto_min_splits=1)).eval()
    return _MODELS[algorithm]


@st.composite
def rows(draw, max_len: int = 2 * CHUNK + S):
    """One row: its real ids, and where they sit among the row's slots (``layout``: padding on the left, on the
    right, or holes anywhere); returns (ids, positions, width of the padded row)."""
    n = draw(st.integers(1, max_len))
    ids = draw(st.lists(st.integers(1, VOCAB - 1), min_size=n, max_size=n))
    pad = draw(st.integers(0, 2 * S + 1))
    layout = draw(st.sampled_from(["right", "left", "holes"]))
    width = n + pad
    if layout == "right":
        pos = list(range(n))
    elif layout == "left":
        pos = list(range(pad, width))
    else:
        pos = sorted(draw(st.permutations(range(width)))[:n])
    return torch.tensor(ids), torch.tensor(pos, dtype=torch.long), width


def padded_batch(batch, pad_id: int):
    width = max(w for _, _, w in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    mask = torch.zeros(len(batch), width, dtype=torch.long)
    for r, (row, pos, _) in enumerate(batch):
        ids[r, pos], mask[r, pos] = row, 1
    return ids, mask


def row_error(out: torch.Tensor, alone: torch.Tensor) -> float:
    """The largest difference relative to the row's largest output."""
    return float((out.float() - alone.float()).abs().max() / alone.float().abs().max().clamp_min(1e-12))


@given(batch=st.lists(rows(), min_size=1, max_size=4), pad_id=st.integers(0, VOCAB - 1),
       algorithm=st.sampled_from(["dense", "vocabulary"]))
def test_real_tokens_ignore_padding_and_the_other_rows_float32(batch, pad_id, algorithm):
    m = model(algorithm)
    ids, mask = padded_batch(batch, pad_id)
    with torch.no_grad():
        out = m(ids, attention_mask=mask).last_hidden_state
        for r, (row, pos, _) in enumerate(batch):
            alone = m(row[None]).last_hidden_state[0]
            torch.testing.assert_close(out[r, pos], alone, rtol=1e-5, atol=1e-5)
    assert torch.isfinite(out).all()  # padding positions too


@given(batch=st.lists(rows(), min_size=1, max_size=3), pad_id=st.integers(0, VOCAB - 1))
def test_real_tokens_ignore_padding_and_the_other_rows_under_bfloat16_autocast(batch, pad_id):
    m = model()
    ids, mask = padded_batch(batch, pad_id)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        out = m(ids, attention_mask=mask).last_hidden_state
        for r, (row, pos, _) in enumerate(batch):
            alone = m(row[None]).last_hidden_state[0]
            assert row_error(out[r, pos], alone) < 0.02, (r, row_error(out[r, pos], alone))
    assert torch.isfinite(out).all()


def fresh_pooled(ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return sentence_embedding(model()(ids[None]).last_hidden_state, None, True)[0]


EDITS = st.lists(st.tuples(st.sampled_from(["feed", "replace", "truncate", "update"]), st.integers(0, 10 ** 6),
                           st.integers(0, 10 ** 6), st.lists(st.integers(1, VOCAB - 1), max_size=3 * S + 1)),
                 min_size=1, max_size=6)


def apply(state: DocumentState, ids: list[int], edit) -> list[int]:
    """One edit of a document (the state's and a plain list's): the ids after it."""
    op, a, b, new = edit
    if op == "feed" or not ids:
        state.feed(new or [1])
        return ids + (new or [1])
    a, b = sorted((a % (len(ids) + 1), b % (len(ids) + 1)))
    if op == "truncate":
        state.truncate(a)
        return ids[:a]
    if op == "replace":
        state.replace(a, b, new)
        return ids[:a] + new + ids[b:]
    changed = ids[:a] + new + ids[b:]
    state.update(changed)
    return changed


@given(edits=EDITS, block=st.sampled_from([S, 2 * S, 1000]))
@example(edits=[("feed", 0, 0, [5] * 9), ("replace", 2, 2, [7, 8])], block=S)  # an insertion inside a split
# found by hypothesis: a deletion given as an empty list (torch.as_tensor([]) is float32) was refused as not integers
@example(edits=[("feed", 0, 0, [5] * 9), ("replace", 2, 6, [])], block=S)
@example(edits=[("feed", 0, 0, [5] * 9), ("update", 3, 9, [])], block=S)
def test_a_document_fed_and_edited_in_pieces_equals_a_fresh_forward(edits, block):
    state, ids = DocumentState(model(), block_tokens=block), []
    for edit in edits:
        ids = apply(state, ids, edit)
        assert state.ids.long().tolist() == ids
        if ids:
            torch.testing.assert_close(state.pooled(), fresh_pooled(torch.tensor(ids)), rtol=1e-5, atol=1e-5)


# -- the release converter ---------------------------------------------------------------------------------------

@few(6)
@given(seed=st.integers(0, 2 ** 16), layers=st.integers(1, 3), split=st.sampled_from([2, 4]), k=st.integers(0, 2),
       length=st.integers(1, 20))
def test_the_release_converter_round_trip_is_exact(tmp_path_factory, seed, layers, split, k, length):
    from test_convert import release_weights, write_release
    from transformers import AutoModelForMaskedLM

    from avey_b.apps.convert import convert_release_checkpoint
    from avey_b.model.release import release_state_dict_to_ours

    root = tmp_path_factory.mktemp("release")
    weights = release_weights(seed=seed)
    # the fixture's shapes, cut to this example's: layers, split size and k
    weights = {key: value for key, value in weights.items()
               if not key.startswith("layers.") or int(key.split(".")[1]) < layers}
    weights["ranker.down_proj"] = weights["ranker.down_proj"][:split, :(k + 1) * split] * 1
    for key in [key for key in weights if key.endswith("spatial_proj")]:
        weights[key] = weights[key][:split, :split] * 1
    src = write_release(root / "release", weights, {"n_layers": layers, "chunk_size": split, "k": k})
    convert_release_checkpoint(src, root / "ours")
    loaded = AutoModelForMaskedLM.from_pretrained(root / "ours").eval()
    state = loaded.state_dict()
    for key, value in release_state_dict_to_ours(weights).items():
        assert torch.equal(state[key], value), key  # the release's tensors, bit for bit
    loaded.save_pretrained(root / "again")
    again = AveyBForMaskedLM.from_pretrained(root / "again").eval()
    direct = AveyBForMaskedLM.from_pretrained(src).eval()
    ids = torch.randint(0, 50, (2, length), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        ref = direct(ids).logits
        assert torch.equal(loaded(ids).logits, ref) and torch.equal(again(ids).logits, ref)
    assert json.loads((root / "again" / "config.json").read_text())["split_size"] == split


# -- slow lane: compiled and exported ------------------------------------------------------------------------------

@pytest.mark.slow
@few(2)
@given(batch=st.lists(rows(), min_size=1, max_size=3))
def test_compiled_equals_eager(batch):
    m = model()
    if "compiled" not in _MODELS:
        _MODELS["compiled"] = torch.compile(m, dynamic=True)
    ids, mask = padded_batch(batch, 0)
    with torch.no_grad():
        want = m(ids, attention_mask=mask).last_hidden_state
        got = _MODELS["compiled"](ids, attention_mask=mask).last_hidden_state
    real = mask.bool()
    torch.testing.assert_close(got[real], want[real], rtol=1e-4, atol=1e-4)


@pytest.mark.slow
@few(3)
@given(batch=st.lists(rows(), min_size=1, max_size=3))
def test_the_onnx_export_equals_eager(tmp_path_factory, batch):
    import onnxruntime as ort

    from avey_b.apps.export import Exportable, export_onnx

    m = model()
    if "onnx" not in _MODELS:
        path = export_onnx(m, tmp_path_factory.mktemp("onnx") / "avey.onnx")
        _MODELS["onnx"] = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    ids, mask = padded_batch(batch, 0)
    with torch.no_grad():
        want = Exportable(m, "last_hidden_state")(ids, mask)
    (got,) = _MODELS["onnx"].run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})
    real = mask.bool()
    torch.testing.assert_close(torch.from_numpy(got)[real], want[real], rtol=1e-4, atol=1e-4)
