"""Corpora, packing and sharding: every token used exactly once across ranks, workers and restarts; clear
errors for bad sources. Data is built inside each test (no network, no shared data sets)."""

import json

import pytest

from avey_b.data.corpus import SourceSpec, is_heldout, iter_documents
from avey_b.data.packing import PackedSequences
from avey_b.data.tokenization import eot_id, train_bpe_tokenizer

WORDS = "alpha beta gamma delta river stone cloud light paper window garden music".split()


def make_docs(n=300):
    return [f"doc {i}: " + " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(i % 41 + 1)) for i in range(n)]


@pytest.fixture(scope="module")
def docs():
    return make_docs()


@pytest.fixture(scope="module")
def tok(docs):
    return train_bpe_tokenizer(docs, 512)


@pytest.fixture
def corpus(tmp_path, docs):
    """The same documents split over a JSONL file and a .txt file (paragraph mode) in a directory."""
    d = tmp_path / "corpus"
    d.mkdir()
    with open(d / "a.jsonl", "w") as f:
        for t in docs[:150]:
            f.write(json.dumps({"text": t}) + "\n")
    (d / "b.txt").write_text("\n\n".join(docs[150:]) + "\n")
    return d


def reference(docs, tok, keep=lambda t: True):
    e = eot_id(tok)
    return [x for t in docs if keep(t) for x in tok(t, add_special_tokens=False)["input_ids"] + [e]]


def collect(spec, tok, world, seq_len=16, **kw):
    """All real tokens emitted by every rank, in global sequence order."""
    out = []
    for r in range(world):
        ps = PackedSequences(spec, tok, seq_len, eot=eot_id(tok), pad_id=tok.pad_token_id, rank=r, world_size=world,
                             loop=False, chunk_docs=7, **kw)
        for x in ps:
            assert x["input_ids"].shape == (seq_len,)
            out.append((x["index"], x["input_ids"][x["attention_mask"].bool()].tolist()))
    indices = [i for i, _ in out]
    assert len(indices) == len(set(indices)), "a global sequence was emitted by two ranks"
    return [t for _, s in sorted(out) for t in s]


def test_directory_reads_jsonl_and_txt_in_order(corpus, docs):
    got = [t for _, t in iter_documents(SourceSpec(str(corpus)))]
    assert got == docs


@pytest.mark.parametrize("world", [1, 2, 3])
def test_no_token_lost_or_duplicated_across_ranks(corpus, docs, tok, world):
    assert collect(SourceSpec(str(corpus)), tok, world) == reference(docs, tok)


def test_worker_processes_give_the_same_stream(corpus, docs, tok):
    assert collect(SourceSpec(str(corpus)), tok, 2, num_workers=2) == reference(docs, tok)


def test_full_sequences_except_the_padded_tail(corpus, tok):
    ps = PackedSequences(SourceSpec(str(corpus)), tok, 32, eot=eot_id(tok), pad_id=tok.pad_token_id, loop=False)
    lengths = [int(x["attention_mask"].sum()) for x in ps]
    assert all(n == 32 for n in lengths[:-1]) and 0 < lengths[-1] <= 32


def test_document_sharding_partitions_the_documents(corpus, docs, tok):
    spec = SourceSpec(str(corpus))
    e = eot_id(tok)
    seen = []
    for r in range(3):
        ps = PackedSequences(spec, tok, 16, eot=e, pad_id=tok.pad_token_id, rank=r, world_size=3, loop=False,
                             shard_by="document")
        toks = [t for x in ps for t in x["input_ids"][x["attention_mask"].bool()].tolist()]
        assert toks == reference(docs[r::3], tok)
        seen.append(toks)
    assert sum(map(len, seen)) == len(reference(docs, tok))


def test_heldout_split_is_disjoint_and_complete(corpus, docs, tok):
    spec = SourceSpec(str(corpus))
    train = collect(spec, tok, 1, split="train", heldout_fraction=0.2)
    held = collect(spec, tok, 1, split="heldout", heldout_fraction=0.2)
    assert train == reference(docs, tok, lambda t: not is_heldout(t, 0.2))
    assert held == reference(docs, tok, lambda t: is_heldout(t, 0.2))
    assert 0 < len(held) < len(train)


def test_restart_from_state_dict_continues_the_stream(corpus, tok):
    """Interrupt each rank mid-epoch (and across the epoch seam) and resume from its state: same sequences."""
    spec = SourceSpec(str(corpus))
    kw = dict(eot=eot_id(tok), pad_id=tok.pad_token_id, world_size=2, loop=True, chunk_docs=5)
    n_total = 400  # more than one pass over the corpus, so the epoch seam is crossed
    for rank in range(2):
        full = PackedSequences(spec, tok, 16, rank=rank, **kw)
        it = iter(full)
        ref = [next(it) for _ in range(n_total)]
        a = PackedSequences(spec, tok, 16, rank=rank, **kw)
        it = iter(a)
        first = [next(it) for _ in range(123)]
        state = a.state_dict()
        b = PackedSequences(spec, tok, 16, rank=rank, **kw)
        b.load_state_dict(state)
        it = iter(b)
        second = [next(it) for _ in range(n_total - 123)]
        got = first + second
        assert [x["index"] for x in got] == [x["index"] for x in ref]
        assert all((x["input_ids"] == y["input_ids"]).all() for x, y in zip(got, ref, strict=True))
    assert full.state_dict()["epoch"] >= 1


def test_state_is_the_same_on_every_rank_in_sequence_mode(corpus, tok):
    spec = SourceSpec(str(corpus))
    states = []
    for r in range(2):
        ps = PackedSequences(spec, tok, 16, eot=eot_id(tok), pad_id=tok.pad_token_id, rank=r, world_size=2)
        it = iter(ps)
        for _ in range(10):
            next(it)
        states.append(ps.state_dict())
    assert states[0]["doc"] == states[1]["doc"] and states[0]["seq"] == states[1]["seq"]
    assert states[0]["buffer"].tolist() == states[1]["buffer"].tolist()


def test_parquet_and_line_mode(tmp_path, docs, tok):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"body": docs[:20]}), tmp_path / "x.parquet")
    assert [t for _, t in iter_documents(SourceSpec(str(tmp_path / "x.parquet"), text_field="body"))] == docs[:20]
    (tmp_path / "l.txt").write_text("one line\n\nsecond line\nthird\n")
    assert [t for _, t in iter_documents(SourceSpec(str(tmp_path / "l.txt"), txt_mode="line"))] == \
        ["one line", "second line", "third"]


def test_missing_path_is_a_clear_error(tmp_path, tok):
    with pytest.raises(FileNotFoundError, match="nope"):
        list(iter_documents(SourceSpec(str(tmp_path / "nope.txt"))))


def test_missing_text_field_is_a_clear_error(tmp_path):
    (tmp_path / "a.jsonl").write_text(json.dumps({"content": "x"}) + "\n")
    with pytest.raises(KeyError, match="'text'"):
        list(iter_documents(SourceSpec(str(tmp_path / "a.jsonl"))))


def test_empty_corpus_is_a_clear_error(tmp_path, tok):
    (tmp_path / "empty.txt").write_text("\n\n  \n")
    ps = PackedSequences(SourceSpec(str(tmp_path / "empty.txt")), tok, 16, eot=eot_id(tok), pad_id=0, loop=True)
    with pytest.raises(ValueError, match="no documents"):
        next(iter(ps))
    (tmp_path / "d").mkdir()
    with pytest.raises(ValueError, match="no supported files"):
        list(iter_documents(SourceSpec(str(tmp_path / "d"))))


@pytest.mark.slow
def test_builtin_python_docs_corpus_is_real_deduplicated_text():
    docs = [t for _, t in iter_documents(SourceSpec("python-docs"))]
    assert len(docs) > 500
    assert len(set(" ".join(d.split()) for d in docs)) == len(docs)
    assert any("for" in d and "statement" in d for d in docs)


def test_heldout_head_documents(corpus, docs, tok):
    spec = SourceSpec(str(corpus))
    assert collect(spec, tok, 2, split="heldout", heldout_docs=40) == reference(docs[:40], tok)
    assert collect(spec, tok, 2, split="train", heldout_docs=40) == reference(docs[40:], tok)


def test_shuffled_epochs_are_permutations_and_resume_exactly(corpus, docs, tok):
    spec = SourceSpec(str(corpus), shuffle_seed=3)
    e0 = [t for _, t in iter_documents(spec, epoch=0)]
    e1 = [t for _, t in iter_documents(spec, epoch=1)]
    assert sorted(e0) == sorted(docs) == sorted(e1) and e0 != docs and e0 != e1
    assert [t for _, t in iter_documents(spec, start=10, epoch=1)] == e1[10:]
    kw = dict(eot=eot_id(tok), pad_id=tok.pad_token_id, loop=True, chunk_docs=5)
    it = iter(PackedSequences(spec, tok, 16, **kw))
    ref = [next(it)["input_ids"] for _ in range(700)]  # crosses into the second (differently shuffled) epoch
    a = PackedSequences(spec, tok, 16, **kw)
    it = iter(a)
    got = [next(it)["input_ids"] for _ in range(400)]
    b = PackedSequences(spec, tok, 16, **kw)
    b.load_state_dict(a.state_dict())
    it = iter(b)
    got += [next(it)["input_ids"] for _ in range(300)]
    assert b.state_dict()["epoch"] == 1
    assert all((x == y).all() for x, y in zip(got, ref, strict=True))


@pytest.mark.parametrize("holdout", [{"data.eval_fraction": 0.2}, {"data.eval_documents": 40, "data.eval_fraction": 0}])
def test_the_tokenizer_is_fitted_on_exactly_the_training_documents(corpus, tok, tmp_path, monkeypatch, holdout):
    """The tokenizer and the training stream apply one hold-out rule: no held-out text leaks into the tokenizer."""
    from avey_b.training import build
    from avey_b.training.config import load_config
    from avey_b.training.distributed import DistInfo

    cfg = load_config(None, ["train.max_steps=1", f"data.train={corpus}", "tokenizer.vocab_size=300",
                             "tokenizer.train_documents=100000"] + [f"{k}={v}" for k, v in holdout.items()])
    seen = []
    fit = build.train_bpe_tokenizer
    monkeypatch.setattr(build, "train_bpe_tokenizer", lambda texts, size: fit(seen.extend(texts) or seen, size))
    build.build_tokenizer(cfg, DistInfo(), tmp_path)
    spec = SourceSpec(str(corpus))
    fraction, first = cfg.data.eval_fraction, cfg.data.eval_documents
    stream = collect(spec, tok, 1, split="train", heldout_fraction=fraction, heldout_docs=first)
    assert reference(seen, tok) == stream  # the same documents, in the same order
    assert 0 < len(seen) < len(list(iter_documents(spec)))
