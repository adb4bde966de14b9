"""A query placed after a document, computed from the query's splits alone (avey_b.model.streaming.query_last and
DocumentState.query), equals the query's positions of a fresh forward of document + query: outputs, the choice it
reports as evidence, and the gradients a head trained on the query's outputs sends back; it costs the query's rows
whatever the document's length.

Random ids from a vocabulary of thousands (see tests/test_streaming.py: no near-tied MaxSim scores)."""

from __future__ import annotations

import pytest
import torch

from avey_b.model import presets
from avey_b.model.modeling import AveyBModel
from avey_b.model.similarity import maxsim, unit_vectors
from avey_b.model.streaming import DocumentState, query_last

VOCAB = 2000


def model(**overrides) -> AveyBModel:
    torch.manual_seed(0)
    return AveyBModel(presets.tiny(vocab_size=VOCAB, **overrides)).eval()


def ids_of(n: int, seed: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (n,), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("doc_len, query_len", [(1, 1), (4, 4), (37, 3), (40, 9), (203, 17), (64, 1)])
def test_the_query_outputs_equal_a_fresh_forward(doc_len, query_len):
    m = model()
    doc, query = ids_of(doc_len, doc_len), ids_of(query_len, 1000 + query_len)
    ids = torch.cat([doc, query])
    with torch.no_grad():
        full = m(ids[None]).last_hidden_state[0, doc_len:]
        out = query_last(m, ids, doc_len)
        via_state = DocumentState(m).feed(doc).query(query)
    assert out.hidden.shape == full.shape == via_state.hidden.shape
    assert float((out.hidden - full).abs().max()) <= 1e-5
    assert float((via_state.hidden - full).abs().max()) <= 1e-5


def test_the_state_is_left_as_it_was_and_only_the_query_splits_run():
    m = model()
    state = DocumentState(m).feed(ids_of(400, 3))
    pooled, computed = state.pooled(), state.computed
    out = state.query(ids_of(10, 4))  # 400 tokens = 100 splits of 4; the query: splits 100..102
    assert out.splits.tolist() == [100, 101, 102]
    assert state.computed == computed and state.length == 400
    assert torch.equal(state.pooled(), pooled)


def test_the_evidence_is_the_document_splits_of_highest_maxsim():
    m = model()
    S = m.config.split_size
    doc, query = ids_of(120, 5), ids_of(S, 6)
    doc[60:64] = query  # the query's tokens planted in split 15
    out = DocumentState(m).feed(doc).query(query)
    evidence = out.evidence(120, S)
    assert evidence[0][0] == 15
    unit = unit_vectors(m.embed_tokens.weight.detach()[torch.cat([doc, query])].view(1, -1, S, m.config.hidden_size))
    score = maxsim(unit, unit, None, None)[0, -1, :-1]  # the query split against every document split
    assert [j for j, _ in evidence] == score.argsort(descending=True)[:len(evidence)].tolist()
    assert evidence[0][1] == pytest.approx(float(score[15]), abs=1e-5)


def test_gradients_equal_those_of_the_full_forward():
    m = model(embedding_dropout=0.0, hidden_dropout=0.0)
    m.train()
    ids = torch.cat([ids_of(50, 7), ids_of(6, 8)])
    target = torch.randn(6, m.config.hidden_size, generator=torch.Generator().manual_seed(9))

    def grads(loss):
        m.zero_grad()
        loss.backward()
        return {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}

    full = grads((m(ids[None]).last_hidden_state[0, 50:] * target).sum())
    last = grads((query_last(m, ids, 50).hidden * target).sum())
    assert full.keys() == last.keys()
    for name in full:
        assert torch.allclose(full[name], last[name], atol=1e-5), name


def test_refused_where_the_query_outputs_depend_on_the_document_outputs():
    with pytest.raises(ValueError, match="bidirectional"):
        query_last(model(ranker="bidirectional"), ids_of(20, 1), 10)
    with pytest.raises(ValueError, match="every_layer"):
        query_last(model(ranker_placement="every_layer"), ids_of(20, 1), 10)
    with pytest.raises(ValueError, match="must hold a token"):
        query_last(model(), ids_of(20, 1), 20)
    with pytest.raises(ValueError, match="empty"):
        DocumentState(model()).feed(ids_of(8, 1)).query([])


@pytest.mark.parametrize("overrides", [{"ranker": "off"}, {"compressor": False}, {"num_retrieved_splits": 0}])
def test_the_ablations_where_it_holds(overrides):
    m = model(**overrides)
    ids = torch.cat([ids_of(45, 11), ids_of(7, 12)])
    with torch.no_grad():
        full = m(ids[None]).last_hidden_state[0, 45:]
        assert float((query_last(m, ids, 45).hidden - full).abs().max()) <= 1e-5


# ---------------------------------------------------------------- the scorer on the query's outputs
def scorer(**overrides):
    from avey_b import AveyBForQueryLastScoring

    torch.manual_seed(0)
    return AveyBForQueryLastScoring(presets.tiny(vocab_size=VOCAB, num_labels=1, **overrides)).eval()


def pair(doc_len: int, query_len: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.cat([ids_of(doc_len, seed), ids_of(query_len, seed + 1)])
    return ids, torch.cat([torch.zeros(doc_len, dtype=torch.long), torch.ones(query_len, dtype=torch.long)])


def test_the_scorer_equals_the_full_forward_pooled_over_the_query_and_pads_on_either_side():
    s = scorer()
    rows = [pair(30, 5, 1), pair(81, 3, 2), pair(4, 9, 3)]
    with torch.no_grad():
        expected = torch.cat([s.classifier(s.model(ids[None]).last_hidden_state[0][types.bool()].mean(0))
                              for ids, types in rows])
        for side in ("right", "left"):
            width = max(ids.numel() for ids, _ in rows)
            batch = torch.zeros(3, width, dtype=torch.long)
            types, mask = torch.zeros_like(batch), torch.zeros_like(batch)
            for r, (ids, t) in enumerate(rows):
                at = slice(0, ids.numel()) if side == "right" else slice(width - ids.numel(), width)
                batch[r, at], types[r, at], mask[r, at] = ids, t, 1
            logits = s(input_ids=batch, attention_mask=mask, token_type_ids=types).logits
            assert logits.shape == (3, 1)
            assert float((logits[:, 0] - expected).abs().max()) <= 1e-5, side


def test_the_scorer_saves_loads_and_scores_a_kept_document(tmp_path):
    from transformers import AutoModelForSequenceClassification

    from avey_b import AveyBForQueryLastScoring

    s = scorer()
    ids, types = pair(60, 6, 4)
    s.save_pretrained(tmp_path)
    loaded = AveyBForQueryLastScoring.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        logit = s(input_ids=ids[None], token_type_ids=types[None]).logits[0]
        assert torch.allclose(loaded(input_ids=ids[None], token_type_ids=types[None]).logits[0], logit, atol=1e-6)
        state = DocumentState(loaded).feed(ids[:60])
        kept, out = loaded.score_state(state, ids[60:])
    assert torch.allclose(kept, logit, atol=1e-5) and out.hidden.shape == (6, s.config.hidden_size)
    with pytest.raises(ValueError, match="AveyBForQueryLastScoring"):
        AutoModelForSequenceClassification.from_pretrained(tmp_path)
    with pytest.raises(ValueError, match="another model"):
        s.score_state(state, ids[60:])


def test_the_scorer_learns_from_the_query_splits():
    s = scorer(classifier_dropout=0.0)
    s.train()
    rows = [pair(40 + 3 * i, 4, 10 * i) for i in range(8)]
    labels = torch.tensor([float(i % 2) for i in range(8)])
    for r, (ids, _) in enumerate(rows):  # relevant rows: the query's tokens planted in the document
        if labels[r]:
            ids[8:12] = ids[-4:]
    width = max(ids.numel() for ids, _ in rows)
    batch, types, mask = (torch.zeros(8, width, dtype=torch.long) for _ in range(3))
    for r, (ids, t) in enumerate(rows):
        batch[r, :ids.numel()], types[r, :ids.numel()], mask[r, :ids.numel()] = ids, t, 1
    opt = torch.optim.AdamW(s.parameters(), lr=3e-3)
    losses = []
    for _ in range(30):
        loss = s(input_ids=batch, attention_mask=mask, token_type_ids=types, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


def test_the_scorer_names_what_its_input_lacks():
    s = scorer()
    ids, types = pair(10, 3, 5)
    with pytest.raises(ValueError, match="token_type_ids"):
        s(input_ids=ids[None])
    with pytest.raises(ValueError, match="must end the row"):
        s(input_ids=ids[None], token_type_ids=types.flip(0)[None])
    with pytest.raises(ValueError, match="no query token"):
        s(input_ids=ids[None], token_type_ids=torch.zeros_like(types)[None])


def test_encoder_score_with_evidence_spans_on_a_text_and_a_kept_document(tmp_path):
    from avey_b import AveyBForQueryLastScoring, Encoder, LoadOptions
    from avey_b import testing as toy

    tok = toy.tokenizer(str(tmp_path))
    torch.manual_seed(0)
    AveyBForQueryLastScoring(presets.tiny(vocab_size=len(tok), num_labels=1, pad_token_id=tok.pad_token_id)
                             ).save_pretrained(tmp_path)
    encoder = Encoder(str(tmp_path), LoadOptions(precision="fp32")).load()
    text = " ".join(["bob met the film in paris today", "a very good film", "the cat was bad"] * 6)
    query = "who met bob in paris"
    got = encoder.score(query, text)
    enc = tok(text, query, return_tensors="pt", return_token_type_ids=True)
    with torch.no_grad():
        logit = encoder.model(**enc).logits[0, 0]
    assert got.score == pytest.approx(float(torch.sigmoid(logit)), abs=1e-6)
    assert 1 <= len(got.evidence) <= 3
    assert [e.score for e in got.evidence] == sorted((e.score for e in got.evidence), reverse=True)
    for e in got.evidence:
        assert 0 <= e.start < e.end <= len(text) and text[e.start:e.end].strip()
    kept = encoder.document(text)
    again = encoder.score(query, kept)
    assert again.score == pytest.approx(got.score, abs=1e-6)
    assert [(e.start, e.end) for e in again.evidence] == [(e.start, e.end) for e in got.evidence]
    assert kept.text == text and len(kept) == len(tok(text)["input_ids"])  # the document is left as it was
    with pytest.raises(ValueError, match="query-last scorer"):
        toy.avey_b(str(tmp_path / "mlm"), tok)
        Encoder(str(tmp_path / "mlm")).score(query, text)

    # served: /rerank and /v1/rerank answer the same scores with the evidence, documents of any length
    from fastapi.testclient import TestClient

    from avey_b.apps.serve import build_app
    from avey_b.apps.serve.options import ServeOptions

    texts = ["the cat was bad", text]
    expected = [encoder.score(query, t) for t in texts]
    with TestClient(build_app(encoder, ServeOptions())) as client:
        assert "rerank" in client.get("/health").json()["serves"]
        tei = client.post("/rerank", json={"query": query, "texts": texts}).json()
        cohere = client.post("/v1/rerank", json={"query": query, "documents": texts}).json()["results"]
        # a document sent once, as a session, then named: the same score and evidence from its state's ids
        assert client.post("/v1/sessions", json={"id": "doc", "text": text}).status_code == 200
        named = client.post("/v1/rerank", json={"query": query, "documents": [{"session": "doc"}, texts[0]]}).json()
        assert len(named["results"]) == 2
        by_index = {r["index"]: r for r in named["results"]}
        assert by_index[0]["relevance_score"] == pytest.approx(expected[1].score, abs=1e-6)
        assert by_index[0]["document"]["text"] == text and by_index[1]["document"]["text"] == texts[0]
        assert by_index[0]["evidence"] == [{"start": e.start, "end": e.end, "score": e.score}
                                           for e in expected[1].evidence]
        missing = client.post("/v1/rerank", json={"query": query, "documents": [{"session": "nope"}]})
        assert missing.status_code == 404 and "no session 'nope'" in missing.text
        both = client.post("/v1/rerank", json={"query": query, "documents": [{"session": "doc", "text": "x"}]})
        assert both.status_code == 422 and "exactly one" in both.text
        assert client.post("/v1/sessions", json={"id": "ids", "input_ids": [5, 6, 7]}).status_code == 200
        of_ids = client.post("/v1/rerank", json={"query": query, "documents": [{"session": "ids"}]})
        assert of_ids.status_code == 400 and "made of token ids" in of_ids.text
    for answer in (tei, cohere):
        assert len(answer) == 2
        for r in answer:
            want = expected[r["index"]]
            assert r.get("score", r.get("relevance_score")) == pytest.approx(want.score, abs=1e-6)
            assert [(e["start"], e["end"]) for e in r["evidence"]] == [(e.start, e.end) for e in want.evidence]


def test_a_text_scored_again_is_not_tokenized_again_and_the_kept_tokens_are_bounded(tmp_path):
    """Encoder.score keeps the tokens of the texts it scored (the next query against the same long document costs
    the query's work only): the same answer, the text's tokenizer call made once; past ``text_cache_bytes`` the
    least recently used text is dropped; the pair is the tokenizer's own pair encoding, ids for ids."""
    from avey_b import AveyBForQueryLastScoring, Encoder, LoadOptions
    from avey_b import testing as toy

    tok = toy.tokenizer(str(tmp_path))
    torch.manual_seed(0)
    AveyBForQueryLastScoring(presets.tiny(vocab_size=len(tok), num_labels=1, pad_token_id=tok.pad_token_id)
                             ).save_pretrained(tmp_path)
    encoder = Encoder(str(tmp_path), LoadOptions(precision="fp32")).load()
    texts = [" ".join(["bob met the film in paris today", "a very good film", "the cat was bad"] * n)
             for n in (3, 5, 7)]
    query = "who met bob in paris"
    first = encoder.score(query, texts[0])
    calls = []
    tokenize = encoder.tokenizer.__call__

    def counted(text, *args, **kw):
        calls.append(text)
        return tokenize(text, *args, **kw)

    # `tokenizer(...)` calls the type's __call__, not an instance attribute: patched on the type for the call
    type(encoder.tokenizer).__call__, saved = (lambda self, *a, **k: counted(*a, **k)), type(encoder.tokenizer).__call__
    try:
        again = encoder.score(query, texts[0])
        assert calls == [query]  # the query only: the text's tokens were kept
        assert (again.score, again.evidence) == (first.score, first.evidence)
    finally:
        type(encoder.tokenizer).__call__ = saved
    lead, mid, trail = encoder._pair_specials
    for text in texts:
        ids, _ = encoder._text_tokens(text)
        assert lead + ids.tolist() + mid + tok(query, add_special_tokens=False)["input_ids"] + trail == tok(
            text, query)["input_ids"]
    small = Encoder(str(tmp_path), LoadOptions(precision="fp32")).load()
    small.text_cache_bytes = 16 * len(small._text_tokens(texts[2])[0]) + len(texts[2])  # room for the longest
    small.score(query, texts[0])  # kept beside texts[2]: too many bytes, texts[2] (the least recently used) drops
    assert list(small._texts) == [texts[0]] and small._texts_bytes <= small.text_cache_bytes
