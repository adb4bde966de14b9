"""Serve's state path (avey_b.apps.serve.documents, prefix, batcher): the prefix cache never changes an answer
(growing, repeated, edited and text inputs, the OpenAI and TEI routes, late chunks) and counts its hits, tokens and
bytes on /metrics; it evicts the least recently used state by bytes; a long input runs a block at a time with the
other requests' batches between its blocks; a model whose later tokens reach earlier splits runs whole inputs and
the start line says why.

Token ids are drawn from a vocabulary of thousands (see tests/test_streaming.py: no near-ties in MaxSim between a
fresh forward and a state); vectors are compared to 1e-5, the state path's float32 rounding."""

from __future__ import annotations

import random
import threading

import numpy as np
import pytest
import torch

from avey_b import AveyBForSentenceEmbedding
from avey_b import testing as toy
from avey_b.model import presets
from avey_b.testing import seeded

pytest.importorskip("fastapi")
pytest.importorskip("prometheus_client")

VOCAB = 2000


def saved(directory, **overrides):
    toy.tokenizer(str(directory))
    model = seeded(AveyBForSentenceEmbedding, presets.tiny(vocab_size=VOCAB, **overrides))
    model.save_pretrained(directory)
    return model


def encoder(directory):
    from avey_b.inference.encoder import Encoder
    from avey_b.inference.options import LoadOptions

    return Encoder(str(directory), LoadOptions(precision="fp32")).load()


def client(directory, **options):
    from fastapi.testclient import TestClient

    from avey_b.apps.serve import build_app
    from avey_b.apps.serve.options import ServeOptions

    # the tests send this model's token ids to /v1/embeddings
    return TestClient(build_app(encoder(directory), ServeOptions(max_tokens=5000, openai_token_ids="model",
                                                                 **options)))


def conversation(seed: int = 0) -> list[list[int]]:
    """Inputs as a chat sends them: a growing document (by pieces that do and do not end on a split), repeats, an
    edit of the last turn, a shorter prefix, and one shorter than a split."""
    rng = random.Random(seed)
    doc, turns = [], []
    for piece in (3, 9, 4, 17, 1, 40, 6):
        doc = doc + [rng.randrange(VOCAB) for _ in range(piece)]
        turns.append(doc)
    return turns + [doc, doc[:-5] + [rng.randrange(VOCAB) for _ in range(5)], doc[:33], doc[:2]]


def metric(client, name: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(client.get("/metrics").text):
        for sample in family.samples:
            if sample.name == name:
                return sample.value
    raise KeyError(name)


def test_cached_and_uncached_answers_are_equal_and_the_model_s_own(tmp_path):
    model = saved(tmp_path)
    turns = conversation()
    texts = ["bob met alice in paris", "bob met alice in paris and they went to the film"]
    answers = {}
    for name, options in (("cached", {"block_tokens": 16}), ("whole", {"prefix_cache_bytes": 0, "block_tokens": 0})):
        with client(tmp_path, **options) as c:
            got = [c.post("/v1/embeddings", json={"input": t, "encoding_format": "float"}).json() for t in turns]
            got += [c.post("/v1/embeddings", json={"input": texts, "encoding_format": "float"}).json(),
                    c.post("/embed", json={"inputs": texts, "normalize": False}).json(),
                    c.post("/v1/embeddings", json={"input": texts[1], "chunk_tokens": 3,
                                                   "encoding_format": "float"}).json()]
            answers[name] = got
            if name == "cached":
                assert metric(c, "avey_b_prefix_cache_hits_total") >= 5
    for cached, whole in zip(answers["cached"], answers["whole"], strict=True):
        if isinstance(cached, dict):
            assert [d.get("chunk") for d in cached["data"]] == [d.get("chunk") for d in whole["data"]]
            assert cached["usage"] == whole["usage"]
            cached, whole = [d["embedding"] for d in cached["data"]], [d["embedding"] for d in whole["data"]]
        np.testing.assert_allclose(np.array(cached), np.array(whole), rtol=0, atol=1e-5)
    with torch.no_grad():
        own = [model(input_ids=torch.tensor([t])).pooler_output[0].numpy() for t in turns]
    for got, want in zip(answers["cached"][:len(turns)], own, strict=True):
        np.testing.assert_allclose(np.array(got["data"][0]["embedding"]), want, rtol=0, atol=1e-5)


def test_metrics_count_hits_misses_tokens_saved_and_bytes(tmp_path):
    saved(tmp_path)
    rng = random.Random(1)
    doc = [rng.randrange(VOCAB) for _ in range(30)]  # 7 full splits of 4 and 2 tokens
    with client(tmp_path, block_tokens=16) as c:
        longer = doc + [5, 6, 7]
        # a miss; a hit of 7 splits (28 tokens), 5 computed; an equal input (all 33 saved); the first again, whose
        # state the longer one superseded: 28 tokens from it, 2 computed; an input shorter than a split: no lookup
        for ids in (doc, longer, longer, doc, [1, 2]):
            assert c.post("/v1/embeddings", json={"input": ids}).status_code == 200
        assert metric(c, "avey_b_prefix_cache_misses_total") == 1
        assert metric(c, "avey_b_prefix_cache_hits_total") == 3
        assert metric(c, "avey_b_prefix_cache_tokens_saved_total") == 28 + 33 + 28
        assert metric(c, "avey_b_prefix_cache_tokens_computed_total") == 30 + 5 + 2
        assert metric(c, "avey_b_prefix_cache_evictions_total") == 0
        service = c.app.state.service
        held = sum(e.nbytes for e in service.documents.cache.entries.values())
        assert metric(c, "avey_b_prefix_cache_bytes") == held > 0
    with client(tmp_path, prefix_cache_bytes=0) as c:  # off: no counters
        with pytest.raises(KeyError):
            metric(c, "avey_b_prefix_cache_hits_total")


def test_the_cache_evicts_the_least_recently_used_state_by_bytes():
    from avey_b.inference.prefix import PrefixCache
    from avey_b.model.modeling import AveyBModel
    from avey_b.model.streaming import DocumentState

    torch.manual_seed(0)
    model = AveyBModel(presets.tiny(vocab_size=VOCAB)).eval()
    docs = [torch.randint(0, VOCAB, (40,), generator=torch.Generator().manual_seed(i)) for i in range(3)]
    states = [DocumentState(model).feed(d) for d in docs]
    vectors = [s.pooled(normalize=False).numpy() for s in states]
    size = states[0].copy().nbytes + vectors[0].nbytes
    cache = PrefixCache(2 * size + size // 2, split_size=4)  # room for two
    cache.store(docs[0], states[0], vectors[0], 40)
    cache.store(docs[1], states[1], vectors[1], 40)
    assert cache.lookup(docs[0]).vector is vectors[0]  # 0 is now the most recently used
    cache.store(docs[2], states[2], vectors[2], 40)  # 1 goes
    assert cache.stats() == {"hits": 1, "misses": 0, "tokens_saved": 40, "tokens_computed": 120, "evictions": 1,
                             "bytes": 2 * size, "entries": 2}
    assert cache.lookup(docs[1]).matched == 0 and cache.lookup(docs[2]).matched == 40
    found = cache.lookup(torch.cat([docs[0][:22], docs[1][:9]]))  # 5 whole splits of doc 0 match
    assert found.matched == 20 and found.state.length == 20 and found.vector is None
    assert cache.stats()["entries"] == 2  # the copy handed out is not the cached state
    small = PrefixCache(size // 2, split_size=4)  # a state larger than the whole cache is not kept
    small.store(docs[0], states[0], vectors[0], 40)
    assert small.stats()["entries"] == 0 and small.stats()["bytes"] == 0


def test_a_short_request_is_answered_between_the_blocks_of_a_long_one(tmp_path):
    """The batcher runs a long input a block at a time: a short request submitted during its first block is
    answered before its second, and the long input's vector equals the whole forward's."""
    from avey_b.apps.serve import Batcher, Job
    from avey_b.apps.serve.documents import Documents
    from avey_b.apps.serve.options import ServeOptions
    from avey_b.apps.serve.work import answer_batch

    saved(tmp_path)
    enc = encoder(tmp_path)
    documents = Documents(enc, ServeOptions(block_tokens=16, prefix_cache_bytes=0))
    events, batcher = [], None
    short = Job("embed", [7, 8, 9])

    def run(kind, jobs):
        events.append("batch")
        return answer_batch(enc, kind, jobs)

    def steps(job):
        inner = documents.steps(job)
        if inner is None:
            return None

        def traced():
            while True:
                try:
                    next(inner)
                except StopIteration as done:
                    events.append("long done")
                    return done.value
                events.append("block")
                if events.count("block") == 1:
                    batcher.submit([short])  # arrives while the long input runs
                yield

        return traced()

    batcher = Batcher(run, max_batch_tokens=4096, queue_size=8, wait_s=0.0, steps=steps)
    ids = torch.randint(0, VOCAB, (70,), generator=torch.Generator().manual_seed(3)).tolist()  # 5 blocks
    long = Job("embed", ids)
    batcher.submit([long])
    vector = long.future.result(60)
    batcher.close()
    assert events == ["block", "batch", "block", "block", "block", "long done"]
    assert short.future.done() and short.future.result().shape == vector.shape
    np.testing.assert_allclose(vector, answer_batch(enc, "embed", [Job("embed", ids)])[0], rtol=0, atol=1e-5)


def test_jobs_in_steps_take_turns_and_their_errors_reach_their_requests():
    from avey_b.apps.serve import Batcher, Job

    events = []

    def steps(job):
        if len(job.ids) < 3:
            return None

        def run():
            for i in range(len(job.ids)):
                events.append((job.ids[0], i))
                if job.ids[0] == 9 and i == 1:
                    raise ValueError("broken")
                yield
            return len(job.ids)

        return run()

    gate = threading.Event()
    batcher = Batcher(lambda kind, jobs: gate.wait(10) and [0] * len(jobs), max_batch_tokens=100, queue_size=8,
                      wait_s=0.0, steps=steps)
    first = Job("embed", [1])
    batcher.submit([first])  # holds the worker until all below are queued
    jobs = [Job("embed", [5, 0, 0]), Job("embed", [9, 0, 0, 0]), Job("embed", [2])]
    batcher.submit(jobs)
    gate.set()
    assert jobs[0].future.result(10) == 3 and jobs[2].future.result(10) == 0
    with pytest.raises(ValueError, match="broken"):
        jobs[1].future.result(10)
    batcher.close()
    assert events[:4] == [(5, 0), (9, 0), (5, 1), (9, 1)] and events[4:] == [(5, 2)]


def test_a_job_in_steps_whose_request_is_gone_stops():
    from avey_b.apps.serve import Batcher, Job

    events, gate = [], threading.Event()

    def steps(job):
        if job.ids[0] != 5:
            return None

        def run():
            for i in range(100):
                events.append(i)
                yield
            return "done"

        return run()

    batcher = Batcher(lambda kind, jobs: gate.wait(10) and [0] * len(jobs), max_batch_tokens=100, queue_size=8,
                      wait_s=0.0, steps=steps)
    batcher.submit([Job("embed", [1])])  # holds the worker
    gone, after = Job("embed", [5]), Job("embed", [2])
    batcher.submit([gone])
    assert gone.future.cancel()  # its client went away before its first step
    batcher.submit([after])
    gate.set()
    assert after.future.result(10) == 0
    batcher.close()
    assert events == []


@pytest.mark.parametrize("overrides,why", [({"ranker": "bidirectional"}, "ranker='bidirectional'"),
                                           ({"ranker_placement": "every_layer"}, "ranker_placement='every_layer'")])
def test_a_model_whose_later_tokens_reach_earlier_splits_runs_whole_inputs_and_says_why(tmp_path, overrides, why):
    from avey_b.apps.serve import Job
    from avey_b.apps.serve.documents import Documents
    from avey_b.apps.serve.options import ServeOptions

    model = saved(tmp_path, **overrides)
    documents = Documents(encoder(tmp_path), ServeOptions(block_tokens=16))
    line = documents.describe()
    assert line.startswith("prefix cache off and long inputs run whole (serve falls back to full encodes): ")
    assert why in line and documents.cache is None
    ids = torch.randint(0, VOCAB, (70,), generator=torch.Generator().manual_seed(4)).tolist()
    assert documents.steps(Job("embed", ids)) is None
    with client(tmp_path, block_tokens=16) as c:
        got = c.post("/v1/embeddings", json={"input": ids, "encoding_format": "float"}).json()["data"][0]["embedding"]
    with torch.no_grad():
        want = model(input_ids=torch.tensor([ids])).pooler_output[0].numpy()
    np.testing.assert_allclose(np.array(got), want, rtol=0, atol=1e-5)


def test_the_start_line_names_the_cache_and_the_block(tmp_path):
    from avey_b.apps.serve.documents import Documents
    from avey_b.apps.serve.options import ServeOptions

    saved(tmp_path)
    enc = encoder(tmp_path)
    line = Documents(enc, ServeOptions(block_tokens=18)).describe()
    assert line == (f"prefix cache up to {256 * 2**20:,} bytes (--prefix-cache-bytes) for inputs of 4 tokens or "
                    "more (--prefix-cache-min-tokens); inputs over 16 tokens run 16 at a time, other requests between")
    assert Documents(enc, ServeOptions(prefix_cache_bytes=0, block_tokens=0)).describe() == (
        "prefix cache off (--prefix-cache-bytes 0); long inputs run whole (--block-tokens 0)")
    with pytest.raises(ValueError, match="prefix_cache_bytes must be at least 0"):
        ServeOptions(prefix_cache_bytes=-1)


def tokens_run(client) -> dict[str, float]:
    """``avey_b_tokens_total`` by route."""
    from prometheus_client.parser import text_string_to_metric_families

    families = text_string_to_metric_families(client.get("/metrics").text)
    return {sample.labels["route"]: sample.value for family in families for sample in family.samples
            if sample.name == "avey_b_tokens_total"}


def test_block_tokens_0_with_the_cache_on_runs_each_input_whole_in_one_step(tmp_path, monkeypatch):
    """--block-tokens 0 says every input runs whole: an input the cache takes is one step (the generator yields
    nothing between blocks), its new tokens ranked and processed in one pass, not a split at a time; its vector is
    the batch's. The cache's default threshold stays a quarter of the default block, not one split."""
    from avey_b.apps.serve import Job
    from avey_b.apps.serve.documents import Documents
    from avey_b.apps.serve.options import ServeOptions
    from avey_b.apps.serve.work import answer_batch
    from avey_b.model.streaming import DocumentState

    saved(tmp_path)
    enc = encoder(tmp_path)
    default = Documents(enc, ServeOptions(block_tokens=0))
    assert default.block == 0 and default.cached_from == 4096 // 4  # the CPU's default block, a quarter of it
    assert default.describe() == (f"prefix cache up to {256 * 2**20:,} bytes (--prefix-cache-bytes) for inputs of "
                                  "1,024 tokens or more (--prefix-cache-min-tokens); long inputs run whole "
                                  "(--block-tokens 0)")
    documents = Documents(enc, ServeOptions(block_tokens=0, prefix_cache_min_tokens=16))
    passes, keep = [], DocumentState._keep  # the splits each pass of a state processes

    def counted(self, block, *rest):
        passes.append(len(block))
        return keep(self, block, *rest)

    monkeypatch.setattr(DocumentState, "_keep", counted)
    ids = torch.randint(0, VOCAB, (70,), generator=torch.Generator().manual_seed(5)).tolist()
    for row in (ids[:50], ids):  # a miss, then a hit of 48 tokens (12 splits) fed the 22 others
        passes.clear()
        steps = documents.steps(Job("embed", row))
        assert steps is not None
        with pytest.raises(StopIteration) as done:  # no step between blocks: the first is the last
            next(steps)
        assert passes == [len(row) // 4 - (12 if row is ids else 0)]  # every new full split in one pass
        want = answer_batch(enc, "embed", [Job("embed", row)])[0]
        np.testing.assert_allclose(done.value.value, want, rtol=0, atol=1e-5)
    assert documents.cache.stats()["hits"] == 1 and documents.cache.stats()["tokens_saved"] == 48


def test_the_cache_threshold_is_an_option_shown_on_the_start_line_and_health(tmp_path):
    """--prefix-cache-min-tokens: an input one token under it runs in a batch and is not kept; one of that many
    tokens is kept, so that the next turn extending it is a hit; the start line and /health show the value; below a
    split it is raised to one; under 1 it is refused."""
    from avey_b.apps.serve.documents import Documents
    from avey_b.apps.serve.options import ServeOptions, serve_parser

    saved(tmp_path)
    rng = random.Random(2)
    turn = [rng.randrange(VOCAB) for _ in range(10)]
    with client(tmp_path, block_tokens=16, prefix_cache_min_tokens=10) as c:
        cache = c.app.state.service.documents.cache
        assert c.post("/v1/embeddings", json={"input": turn[:9]}).status_code == 200
        assert cache.stats() | {"bytes": 0} == {"hits": 0, "misses": 0, "tokens_saved": 0, "tokens_computed": 0,
                                                "evictions": 0, "bytes": 0, "entries": 0}
        assert c.post("/v1/embeddings", json={"input": turn}).status_code == 200
        assert cache.stats()["entries"] == 1 and cache.stats()["misses"] == 1
        assert c.post("/embed", json={"inputs": [turn + [5, 6, 7]]}).status_code == 200
        assert cache.stats()["hits"] == 1 and cache.stats()["tokens_saved"] == 8  # two whole splits of the turn
        assert c.get("/health").json()["prefix_cache_min_tokens"] == 10
        assert "for inputs of 10 tokens or more (--prefix-cache-min-tokens)" in c.app.state.service.documents.describe()
    with client(tmp_path, prefix_cache_bytes=0) as c:
        assert c.get("/health").json()["prefix_cache_min_tokens"] is None
    enc = encoder(tmp_path)
    assert Documents(enc, ServeOptions(prefix_cache_min_tokens=1)).cached_from == 4  # one split of the tiny model
    assert serve_parser().parse_args(["model", "--prefix-cache-min-tokens", "7"]).prefix_cache_min_tokens == 7
    with pytest.raises(ValueError, match="prefix_cache_min_tokens must be at least 1"):
        ServeOptions(prefix_cache_min_tokens=0)


def test_tokens_total_counts_the_tokens_run_through_the_model_not_those_the_cache_held(tmp_path):
    saved(tmp_path)
    rng = random.Random(3)
    doc = [rng.randrange(VOCAB) for _ in range(30)]
    longer = doc + [5, 6, 7]
    with client(tmp_path, block_tokens=16) as c:
        # a miss (30 computed), a hit of 7 splits (28 held, 5 computed), an equal input (33 held, none computed),
        # through both embedding routes; an input shorter than a split runs in a batch (2 computed)
        assert c.post("/v1/embeddings", json={"input": doc}).status_code == 200
        assert c.post("/v1/embeddings", json={"input": longer}).status_code == 200
        assert c.post("/embed", json={"inputs": [longer, [1, 2]]}).status_code == 200
        assert tokens_run(c) == {"/v1/embeddings": 30 + 5, "/embed": 0 + 2}
        assert metric(c, "avey_b_prefix_cache_tokens_saved_total") == 28 + 33
    with client(tmp_path, prefix_cache_bytes=0, block_tokens=16) as c:  # no cache: every token runs
        for _ in range(2):
            assert c.post("/v1/embeddings", json={"input": longer}).status_code == 200
        assert tokens_run(c) == {"/v1/embeddings": 2 * 33}
