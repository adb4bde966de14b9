"""``avey-b embed``: a corpus of mixed lengths, in every input format, gives exactly the embedding head's vector of
each document run alone; a killed job resumes without recomputing its finished shards and ends with the vectors of
an uninterrupted run; a rerun with other settings is refused, naming them; an over-long document is listed as
skipped, never cut; late chunking gives, per chunk, the mean of that chunk's token states from one forward over
the whole document (recomputed by hand here), whatever the padding side and wherever the chunks cut the splits."""

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch
import torch.nn.functional as F

from avey_b import AveyBForMaskedLM, AveyBForSentenceEmbedding
from avey_b import testing as toy
from avey_b.apps.embed import MANIFEST, EmbedOptions, embed_corpus, job, shards
from avey_b.inference.encoder import Encoder
from avey_b.inference.options import LoadOptions
from avey_b.model import presets
from avey_b.testing import seeded

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

WORDS = "the a film plot cast was very good awful weak and music superb bob alice paris today".split()


def corpus(n: int = 11, seed: int = 0) -> list[str]:
    """Documents of 1 to ~60 words (3 to ~70 tokens: below, at and across the tiny config's split size S = 4)."""
    rng = random.Random(seed)
    lengths = ([1, 2, 3, 60, 5, 17, 40, 8, 1, 25, 33, 12, 50, 7][:n]
               + [rng.randint(1, 60) for _ in range(max(0, n - 14))])
    return [" ".join(rng.choice(WORDS) for _ in range(k)) for k in lengths]


@pytest.fixture(scope="module")
def head(model_dir):
    from transformers import AutoTokenizer

    return AveyBForSentenceEmbedding.from_pretrained(model_dir).eval(), AutoTokenizer.from_pretrained(model_dir)


def alone(head, text: str) -> torch.Tensor:
    """The embedding head's vector of one document, run alone (no padding, no batch)."""
    model, tok = head
    with torch.no_grad():
        return model(**tok([text], return_tensors="pt")).pooler_output[0]


def run(model_dir, source, out, **kw):
    kw = {"load": LoadOptions(precision="fp32"), "shard_size": 4, "max_batch_tokens": 96, "progress": False, **kw}
    return embed_corpus(str(model_dir), str(source), str(out), EmbedOptions(**kw))


def vectors(out) -> dict[str, torch.Tensor]:
    table = pq.read_table(out)
    return {i: torch.tensor(v) for i, v in zip(table["id"].to_pylist(), table["vector"].to_pylist(), strict=True)}


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def layouts(tmp_path, docs):
    """Every input format, as (source, options, {id: text})."""
    files = tmp_path / "files"
    files.mkdir()
    for i, d in enumerate(docs):
        (files / f"doc{i:02d}.txt").write_text(d + "\n")
    (tmp_path / "lines.txt").write_text("\n".join(docs[:5]) + "\n\n" + "\n".join(docs[5:]) + "\n")  # a blank line
    write_jsonl(tmp_path / "d.jsonl", [{"text": d, "n": i} for i, d in enumerate(docs)])
    pq.write_table(pa.table({"body": docs, "key": [f"k{i}" for i in range(len(docs))]}), tmp_path / "d.parquet")
    mixed = tmp_path / "mixed"
    (mixed / "sub").mkdir(parents=True)
    write_jsonl(mixed / "b.jsonl", [{"text": d} for d in docs[:5]])
    pq.write_table(pa.table({"text": docs[5:10]}), mixed / "c.parquet")
    (mixed / "sub" / "a.txt").write_text(docs[10])
    line_ids = [f"lines.txt:{i + 1}" for i in range(5)] + [f"lines.txt:{i + 2}" for i in range(5, len(docs))]
    return {
        "txt": (files, {}, {f"doc{i:02d}.txt": d for i, d in enumerate(docs)}),
        "txt-lines": (tmp_path / "lines.txt", {"lines": True}, dict(zip(line_ids, docs, strict=True))),
        "jsonl": (tmp_path / "d.jsonl", {}, {f"d.jsonl:{i + 1}": d for i, d in enumerate(docs)}),
        "parquet": (tmp_path / "d.parquet", {"text_column": "body", "id_column": "key"},
                    {f"k{i}": d for i, d in enumerate(docs)}),
        "directory": (mixed, {}, {**{f"b.jsonl:{i + 1}": docs[i] for i in range(5)},  # files in sorted path order
                                  **{f"c.parquet:{i - 5}": docs[i] for i in range(5, 10)}, "sub/a.txt": docs[10]}),
    }


@pytest.mark.parametrize("layout", ["txt", "txt-lines", "jsonl", "parquet", "directory"])
def test_embed_equals_the_head_on_each_document_alone(tmp_path, model_dir, head, layout):
    docs = corpus()
    source, options, expected = layouts(tmp_path, docs)[layout]
    manifest = run(model_dir, source, tmp_path / "out", **options)
    table = pq.read_table(tmp_path / "out")
    assert table["id"].to_pylist() == list(expected)  # input order, documented ids
    assert table.schema.field("vector").type == pa.list_(pa.float32(), 32)
    tok = head[1]
    assert table["n_tokens"].to_pylist() == [len(tok(t)["input_ids"]) for t in expected.values()]
    for doc_id, got in vectors(tmp_path / "out").items():
        torch.testing.assert_close(got, alone(head, expected[doc_id]), rtol=0, atol=1e-5)
    assert manifest["status"] == "complete" and manifest["counts"]["documents"] == len(docs)
    assert manifest["counts"]["shards"] == 3 and sorted(os.listdir(tmp_path / "out")) == [
        MANIFEST, "part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]
    on_disk = json.loads((tmp_path / "out" / MANIFEST).read_text())
    assert on_disk["settings"]["model_sha256"].keys() == {"config.json", "model.safetensors"}
    assert on_disk["settings"]["precision"] == "fp32" and on_disk["counts"] == manifest["counts"]


def test_a_masked_lm_checkpoint_embeds_with_the_heads_rule(tmp_path):
    tok = toy.tokenizer(str(tmp_path / "mlm"))
    seeded(AveyBForMaskedLM, presets.tiny(vocab_size=len(tok))).save_pretrained(tmp_path / "mlm")
    docs = corpus(5)
    write_jsonl(tmp_path / "d.jsonl", [{"text": d} for d in docs])
    run(tmp_path / "mlm", tmp_path / "d.jsonl", tmp_path / "out")
    as_head = (AveyBForSentenceEmbedding.from_pretrained(tmp_path / "mlm").eval(), tok)
    for i, got in enumerate(vectors(tmp_path / "out").values()):
        torch.testing.assert_close(got, alone(as_head, docs[i]), rtol=0, atol=1e-5)
        assert abs(float(got.norm()) - 1) < 1e-5  # normalize_embeddings defaults to True


class Killed(Exception):
    pass


def test_a_killed_job_resumes_without_recomputing_finished_shards(tmp_path, model_dir, monkeypatch):
    docs = corpus(14)
    write_jsonl(tmp_path / "d.jsonl", [{"text": d} for d in docs])
    run(model_dir, tmp_path / "d.jsonl", tmp_path / "whole")

    write = shards.write_shard
    written, forwarded = [], []

    def killed_after_one(path, table):
        if written:
            raise Killed  # the second shard is in flight when the job dies
        written.append(path.name)
        write(path, table)

    monkeypatch.setattr(shards, "write_shard", killed_after_one)
    with pytest.raises(Killed):
        run(model_dir, tmp_path / "d.jsonl", tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [MANIFEST, "part-00000.parquet"]
    first = (tmp_path / "out" / "part-00000.parquet").stat()

    monkeypatch.setattr(shards, "write_shard", lambda path, table: (written.append(path.name), write(path, table)))
    forward = Encoder.hidden_states
    monkeypatch.setattr(Encoder, "hidden_states", lambda self, batch, mask: (
        forwarded.extend(int(n) for n in mask.sum(1)), forward(self, batch, mask))[1])
    manifest = run(model_dir, tmp_path / "d.jsonl", tmp_path / "out")
    assert written == ["part-00000.parquet", "part-00001.parquet", "part-00002.parquet", "part-00003.parquet"]
    tok_lengths = [len(t) for t in head_lengths(model_dir, docs)]
    assert sorted(forwarded) == sorted(tok_lengths[4:])  # exactly the documents of the unfinished shards
    assert (tmp_path / "out" / "part-00000.parquet").stat().st_mtime_ns == first.st_mtime_ns
    assert [(r["shards_found"], r["shards_written"]) for r in manifest["runs"]] == [(0, 1), (1, 3)]
    resumed, whole = pq.read_table(tmp_path / "out"), pq.read_table(tmp_path / "whole")
    assert resumed.drop(["vector"]).equals(whole.drop(["vector"]))
    assert resumed["vector"].to_pylist() == whole["vector"].to_pylist()  # bit for bit

    forwarded.clear()
    run(model_dir, tmp_path / "d.jsonl", tmp_path / "out")  # all done: nothing recomputed
    assert forwarded == []


def first_format_manifest(model_dir, source, max_tokens: int) -> dict:
    """The manifest of a killed run (one shard of 4 written) as ``avey-b embed`` 0.1.0 wrote it, built here from its
    rules: its settings a JSON object of these keys, in this order."""
    import hashlib

    from avey_b.utils.files import content_hash

    def hashes(patterns):
        names = sorted({p.name for pattern in patterns for p in model_dir.glob(pattern) if p.is_file()})
        return {name: hashlib.sha256((model_dir / name).read_bytes()).hexdigest() for name in names}

    settings = {
        "model_sha256": hashes(("config.json", "*.safetensors", "pytorch_model*.bin")),
        "tokenizer_sha256": hashes(("tokenizer*.json", "special_tokens_map.json", "vocab.*", "merges.txt", "*.model")),
        "input_sha256": content_hash(source), "hf_dataset": None, "lines": False, "text_column": "text",
        "id_column": None, "chunking": "none", "chunk_tokens": None, "chunk_spans_column": None, "dtype": "float32",
        "shard_size": 4, "max_tokens": max_tokens, "precision": "fp32"}
    return {"format": "avey-b embed 1", "status": "running",
            "model": {"path": str(model_dir), "architecture": "AveyBForSentenceEmbedding", "pooling": "...",
                      "normalize_embeddings": True, "dim": 32},
            "input": {"source": str(source), "ids": "made up: ..."}, "settings": settings,
            "runs": [{"started": "2026-01-01T00:00:00Z", "device": "cpu", "max_batch_tokens": 96, "backend": "local",
                      "shards_found": 0, "shards_written": 1}]}


def test_a_manifest_of_the_first_format_resumes(tmp_path, model_dir):
    docs = corpus(10)
    write_jsonl(tmp_path / "d.jsonl", [{"text": d} for d in docs])
    whole = run(model_dir, tmp_path / "d.jsonl", tmp_path / "whole", max_tokens=100)
    old = first_format_manifest(model_dir, tmp_path / "d.jsonl", 100)
    first = len(old["settings"])  # the same record, key for key, then the settings added since
    assert list(whole["settings"].items())[:first] == list(old["settings"].items())
    assert list(whole["settings"])[first:] == list(shards.FIRST_FORMAT)
    assert list(whole) == [*old, "counts", "shards", "skipped"] and whole["model"].keys() == old["model"].keys()

    out = tmp_path / "out"
    out.mkdir()
    shutil.copy(tmp_path / "whole" / "part-00000.parquet", out)  # the shard that run wrote before it was killed
    (out / MANIFEST).write_text(json.dumps(old, indent=2))
    resumed = run(model_dir, tmp_path / "d.jsonl", out, max_tokens=100)
    assert [(r["shards_found"], r["shards_written"]) for r in resumed["runs"]] == [(0, 1), (1, 2)]
    assert pq.read_table(out).equals(pq.read_table(tmp_path / "whole"))
    old["settings"]["dtype"] = "float16"  # and a difference in it is still named
    (out / MANIFEST).write_text(json.dumps(old))
    with pytest.raises(ValueError, match=r"dtype: 'float16' then, 'float32' now"):
        run(model_dir, tmp_path / "d.jsonl", out, max_tokens=100)


def head_lengths(model_dir, docs):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)(docs)["input_ids"]


def test_a_rerun_with_other_settings_is_refused_naming_them(tmp_path, model_dir):
    docs = corpus(6)
    write_jsonl(tmp_path / "d.jsonl", [{"text": d} for d in docs])
    with pytest.raises(KeyError, match=r"d.jsonl, line 1: no text column 'body'"):
        run(model_dir, tmp_path / "d.jsonl", tmp_path / "out", text_column="body")
    run(model_dir, tmp_path / "d.jsonl", tmp_path / "out")  # no shard was written: the corrected run may start
    before = pq.read_table(tmp_path / "out")
    with pytest.raises(ValueError, match=r"dtype: 'float32' then, 'float16' now"):
        run(model_dir, tmp_path / "d.jsonl", tmp_path / "out", dtype="float16")
    with pytest.raises(ValueError, match=r"chunk_tokens: None then, 8 now; chunking: 'none' then, 'late' now"):
        run(model_dir, tmp_path / "d.jsonl", tmp_path / "out", chunking="late", chunk_tokens=8)
    write_jsonl(tmp_path / "d.jsonl", [{"text": d} for d in docs[::-1]])
    with pytest.raises(ValueError, match="input_sha256"):
        run(model_dir, tmp_path / "d.jsonl", tmp_path / "out")
    assert pq.read_table(tmp_path / "out").equals(before)  # nothing mixed in
    write_jsonl(tmp_path / "d.jsonl", [{"text": d} for d in docs])
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="not an avey-b embed output"):
        run(model_dir, tmp_path / "d.jsonl", tmp_path / "other")

    run(model_dir, tmp_path / "d.jsonl", tmp_path / "half", dtype="float16")
    half = pq.read_table(tmp_path / "half")
    assert half.schema.field("vector").type == pa.list_(pa.float16(), 32)
    full = vectors(tmp_path / "out")
    for doc_id, v in vectors(tmp_path / "half").items():
        torch.testing.assert_close(v.float(), full[doc_id], rtol=0, atol=2e-3)


def test_an_over_long_document_is_skipped_and_listed_never_cut(tmp_path, model_dir, head, monkeypatch):
    docs = ["a good film", "bob " * 30, "the plot was weak"]  # 32 tokens for the second
    write_jsonl(tmp_path / "d.jsonl", [{"text": d, "id": f"doc-{i}"} for i, d in enumerate(docs)])
    manifest = run(model_dir, tmp_path / "d.jsonl", tmp_path / "out", max_tokens=20, id_column="id")
    assert manifest["skipped"] == [{"id": "doc-1", "n_tokens": 32, "reason": "longer than max_tokens (20); never cut"}]
    assert manifest["counts"] | {"seconds": 0} == {"documents": 3, "embedded": 2, "skipped": 1, "rows": 2, "tokens": 11,
                                                   "shards": 1, "seconds": 0}
    got = vectors(tmp_path / "out")
    assert list(got) == ["doc-0", "doc-2"]
    torch.testing.assert_close(got["doc-2"], alone(head, docs[2]), rtol=0, atol=1e-5)
    # the default limit is what memory allows (serve's rule); a rerun keeps the recorded one (memory varies)
    monkeypatch.setattr(job, "default_max_tokens", lambda hidden_size: 25)
    first = run(model_dir, tmp_path / "d.jsonl", tmp_path / "default", id_column="id", shard_size=2)
    assert first["settings"]["max_tokens"] == 25 and [s["id"] for s in first["skipped"]] == ["doc-1"]
    monkeypatch.setattr(job, "default_max_tokens", lambda hidden_size: 4096)
    (tmp_path / "default" / "part-00001.parquet").unlink()  # as if killed before the last shard
    again = run(model_dir, tmp_path / "d.jsonl", tmp_path / "default", id_column="id", shard_size=2)
    assert again["settings"]["max_tokens"] == 25 and again["skipped"] == first["skipped"]


# ------------------------------------------------------------------------------------------------ late chunking
def by_hand(head, text: str, ranges) -> torch.Tensor:
    """Each chunk's vector from one unpadded forward over the whole document: the mean of its token states,
    L2-normalized (the head's config says so)."""
    model, tok = head
    with torch.no_grad():
        hidden = model.model(**tok([text], return_tensors="pt")).last_hidden_state[0]
    return torch.stack([F.normalize(hidden[a:b].mean(0), dim=-1) for a, b in ranges])


@pytest.mark.parametrize("side", ["right", "left"])
def test_encode_chunks_is_the_mean_of_each_chunks_states_from_one_forward(head, side):
    model, tok = head
    texts = ["the film was very good and the music was superb today", "bob was weak", "a plot"]
    chunks = [[(0, 3), (2, 7), (3, 12), (12, 13)],  # overlapping; (2, 7) and (3, 12) cross split boundaries (S = 4)
              [(1, 4), (0, 5)], [(0, 4)]]
    tok.padding_side = side
    try:
        enc = tok(texts, padding=True, return_tensors="pt")
    finally:
        tok.padding_side = "right"
    assert (enc.attention_mask == 0).any()  # padding on the chosen side
    with torch.no_grad():
        got = model.encode_chunks(enc.input_ids, enc.attention_mask, chunks)
    for text, ranges, vectors_ in zip(texts, chunks, got, strict=True):
        torch.testing.assert_close(vectors_, by_hand(head, text, ranges), rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="not a non-empty token range"):
        model.encode_chunks(enc.input_ids, enc.attention_mask, [[(0, 99)], [(0, 1)], [(0, 1)]])


def test_embed_late_chunking_by_tokens_and_by_character_spans(tmp_path, model_dir, head):
    tok = head[1]
    docs = corpus(6)
    spans = [[[0, len(d)]] if len(d) < 24 else [[0, 9], [9, len(d) // 2], [len(d) // 2, len(d)]] for d in docs]
    write_jsonl(tmp_path / "d.jsonl", [{"text": d, "spans": s} for d, s in zip(docs, spans, strict=True)])
    for name, options in (("tokens", {"chunk_tokens": 5}), ("spans", {"chunk_spans_column": "spans"})):
        out = tmp_path / name
        run(model_dir, tmp_path / "d.jsonl", out, chunking="late", **options)
        table = pq.read_table(out).to_pylist()
        for i, doc in enumerate(docs):
            rows = [r for r in table if r["id"] == f"d.jsonl:{i + 1}"]
            enc = tok(doc, return_offsets_mapping=True)
            offsets = enc["offset_mapping"]
            n = len(enc["input_ids"])
            text_tokens = list(range(1, n - 1))  # [CLS] ... [SEP]
            if name == "tokens":
                ranges = [(text_tokens[j], min(text_tokens[j] + 5, n - 1)) for j in range(0, len(text_tokens), 5)]
                chars = [(offsets[a][0], offsets[b - 1][1]) for a, b in ranges]
            else:
                ranges = [(min(t for t in text_tokens if a <= offsets[t][0] < b),
                           max(t for t in text_tokens if a <= offsets[t][0] < b) + 1) for a, b in spans[i]]
                chars = [tuple(s) for s in spans[i]]
            assert [r["chunk"] for r in rows] == list(range(len(ranges)))
            assert [(r["char_start"], r["char_end"]) for r in rows] == chars
            assert [r["n_tokens"] for r in rows] == [b - a for a, b in ranges]
            torch.testing.assert_close(torch.tensor([r["vector"] for r in rows]), by_hand(head, doc, ranges),
                                       rtol=0, atol=1e-5)
    write_jsonl(tmp_path / "bad.jsonl", [{"text": "a good film", "spans": [[0, 4], [3, 99]]}])
    with pytest.raises(ValueError, match=r"bad.jsonl, line 1: 'spans' must be a list of \[start, end\]"):
        run(model_dir, tmp_path / "bad.jsonl", tmp_path / "bad", chunking="late", chunk_spans_column="spans")


# ---------------------------------------------------------------------------------------- a real kill (SIGTERM)
@pytest.mark.slow
def test_sigterm_mid_job_then_rerun_gives_the_uninterrupted_vectors(tmp_path, model_dir):
    docs = corpus(1000, seed=1)
    write_jsonl(tmp_path / "d.jsonl", [{"text": d} for d in docs])
    command = [sys.executable, "-m", "avey_b.cli", "embed", str(model_dir), str(tmp_path / "d.jsonl"),
               str(tmp_path / "out"), "--precision", "fp32", "--shard-size", "10", "--max-batch-tokens", "512"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    deadline = time.time() + 120
    while not (tmp_path / "out" / "part-00001.parquet").exists():
        assert proc.poll() is None and time.time() < deadline, proc.stdout.read()
        time.sleep(0.005)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGTERM
    done = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "out").glob("part-*.parquet")}
    print(f"killed after {len(done)} of 100 shards")
    assert 2 <= len(done) < 100, "the job was not killed mid-way"

    finished = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert finished.returncode == 0, finished.stderr[-2000:]
    assert f"{len(done)} found done" in finished.stdout
    assert all((tmp_path / "out" / name).stat().st_mtime_ns == t for name, t in done.items())  # not rewritten
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.startswith(".")]  # no temporary file left
    run(model_dir, tmp_path / "d.jsonl", tmp_path / "whole", shard_size=10, max_batch_tokens=512)
    assert pq.read_table(tmp_path / "out").equals(pq.read_table(tmp_path / "whole"))


# ------------------------------------------------------------------------------------------------ Ray backend
@pytest.mark.slow
def test_the_ray_backend_gives_the_local_vectors_and_manifest(tmp_path, model_dir, monkeypatch):
    pytest.importorskip("ray.data")
    waves, pipeline = [], job.run_on_ray
    monkeypatch.setattr(job, "run_on_ray", lambda pending, *a: (waves.append(len(pending)), pipeline(pending, *a))[1])
    docs = corpus(14)
    write_jsonl(tmp_path / "d.jsonl", [{"text": d, "meta": {"i": i, "tags": ["x"] * (i % 3)}}
                                       for i, d in enumerate(docs)])
    kept = {"keep_columns": ("meta",), "with_text": True}  # the kept columns travel to the actors with their types
    local = run(model_dir, tmp_path / "d.jsonl", tmp_path / "local", max_tokens=60, **kept)
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # inherited by the local Ray's workers
    on_ray = run(model_dir, tmp_path / "d.jsonl", tmp_path / "ray", max_tokens=60, backend="ray", concurrency=2,
                 ray_wave=1, **kept)  # two waves of two shards
    assert (on_ray["settings"] == local["settings"]
            and on_ray["counts"] | {"seconds": 0} == local["counts"] | {"seconds": 0})
    assert on_ray["skipped"] == local["skipped"] != [] and on_ray["shards"] == local["shards"]
    assert on_ray["runs"][-1] | {"started": 0, "finished": 0, "seconds": 0} == {
        "started": 0, "finished": 0, "seconds": 0, "backend": "ray", "device": "cpu", "max_batch_tokens": 96,
        "shards_found": 0, "shards_written": 4, "ray_address": None, "concurrency": 2, "num_gpus": 0}
    assert waves == [2, 2]
    assert sorted(os.listdir(tmp_path / "ray")) == sorted(os.listdir(tmp_path / "local"))
    assert pq.read_table(tmp_path / "ray").equals(pq.read_table(tmp_path / "local"))


# ------------------------------------------------------------------------------------- output for a vector database
def test_embed_uses_the_id_field_and_keeps_the_named_columns_with_their_types(tmp_path, model_dir, head):
    docs = corpus(9)
    rows = [{"id": f"doc-{i}", "text": d, "source": f"s{i % 2}", "offsets": [i, i + len(d)],
             "meta": {"page": i, "tags": ["a"] * (i % 3)}, "score": i if i < 5 else i + 0.5,  # ints, then floats
             "note": None if i < 6 else "late"} for i, d in enumerate(docs)]  # nulls for two shards, then strings
    write_jsonl(tmp_path / "d.jsonl", rows)
    keep = ("source", "offsets", "meta", "score", "note")
    manifest = run(model_dir, tmp_path / "d.jsonl", tmp_path / "out", keep_columns=("source,offsets", "meta", "score",
                                                                                    "note"))
    assert manifest["settings"]["keep_columns"] == list(keep) and manifest["input"]["ids"].startswith("column 'id'")
    assert len(list((tmp_path / "out").glob("part-*"))) == 3  # one type per column across the shards
    table = pq.read_table(tmp_path / "out")
    assert table.column_names == ["id", "n_tokens", *keep, "vector"]
    assert table.schema.field("score").type == pa.float64() and table.schema.field("note").type == pa.string()
    assert table.schema.field("offsets").type == pa.list_(pa.int64())
    got = table.drop(["vector", "n_tokens"]).to_pylist()
    assert got == [{k: r[k] for k in ("id", *keep)} for r in rows]  # the id field by default, the values as given
    for r in rows:
        torch.testing.assert_close(vectors(tmp_path / "out")[r["id"]], alone(head, r["text"]), rtol=0, atol=1e-5)

    # Parquet keeps its own types; --id-column still names another field
    when = pa.array([1_700_000_000_000_000 + i for i in range(4)], pa.timestamp("us", tz="UTC"))
    pq.write_table(pa.table({"text": docs[:4], "id": ["x"] * 4, "key": ["k0", "k1", "k2", "k3"],
                             "n": pa.array(range(4), pa.int16()), "when": when}), tmp_path / "d.parquet")
    run(model_dir, tmp_path / "d.parquet", tmp_path / "pq", id_column="key", keep_columns=("n", "when"), shard_size=3)
    table = pq.read_table(tmp_path / "pq")
    assert table["id"].to_pylist() == ["k0", "k1", "k2", "k3"] and table["n"].type == pa.int16()
    assert table["when"].equals(pa.chunked_array([when]))

    write_jsonl(tmp_path / "gap.jsonl", rows[:2] + [{k: v for k, v in rows[2].items() if k != "meta"}])
    with pytest.raises(KeyError, match=r"gap.jsonl, line 3: no column 'meta' to keep"):
        run(model_dir, tmp_path / "gap.jsonl", tmp_path / "gap", keep_columns=("meta",))
    assert not (tmp_path / "gap").exists()  # the input is checked whole before anything is written
    with pytest.raises(KeyError, match=r"d.parquet: no column 'meta'"):
        run(model_dir, tmp_path / "d.parquet", tmp_path / "gap", keep_columns=("meta",))
    write_jsonl(tmp_path / "mixed.jsonl", [{"text": "a film"}, {"text": "a plot", "id": "p"}])
    with pytest.raises(ValueError, match=r"mixed.jsonl, line 2: the row has an 'id' field but the first row"):
        run(model_dir, tmp_path / "mixed.jsonl", tmp_path / "mixed")
    write_jsonl(tmp_path / "types.jsonl", [{"text": "a film", "x": 1}, {"text": "a plot", "x": "one"}])
    with pytest.raises(ValueError, match=r"types.jsonl, line 2: a kept column's value fits no one type"):
        run(model_dir, tmp_path / "types.jsonl", tmp_path / "types", keep_columns=("x",))
    with pytest.raises(ValueError, match="'vector' is a column embed writes itself"):
        EmbedOptions(keep_columns=("source", "vector"))


def test_a_duplicate_id_is_an_error_naming_both_places_before_anything_is_written(tmp_path, model_dir):
    write_jsonl(tmp_path / "d.jsonl", [{"id": f"doc-{i % 4}", "text": d} for i, d in enumerate(corpus(6))])
    with pytest.raises(ValueError, match=r"d.jsonl, line 5: duplicate id 'doc-0' \(first at .*d.jsonl, line 1\)"):
        run(model_dir, tmp_path / "d.jsonl", tmp_path / "out")
    assert not (tmp_path / "out").exists()
    pq.write_table(pa.table({"text": ["a", "b", "c"], "id": [7, 8, 7]}), tmp_path / "d.parquet")
    with pytest.raises(ValueError, match=r"d.parquet, row 2: duplicate id '7' \(first at .*d.parquet, row 0\)"):
        run(model_dir, tmp_path / "d.parquet", tmp_path / "out")


def test_with_text_stores_each_documents_or_chunks_text(tmp_path, model_dir):
    docs = corpus(6)
    write_jsonl(tmp_path / "d.jsonl", [{"text": d} for d in docs])
    run(model_dir, tmp_path / "d.jsonl", tmp_path / "docs", with_text=True)
    assert pq.read_table(tmp_path / "docs")["text"].to_pylist() == docs
    run(model_dir, tmp_path / "d.jsonl", tmp_path / "late", with_text=True, chunking="late", chunk_tokens=4,
        chunk_overlap=1)
    rows = pq.read_table(tmp_path / "late").to_pylist()
    assert len(rows) > len(docs) and {r["id"] for r in rows} == {f"d.jsonl:{i + 1}" for i in range(len(docs))}
    for r in rows:
        assert r["text"] == docs[int(r["id"].split(":")[1]) - 1][r["char_start"]:r["char_end"]] != ""


def test_chunk_overlap_shares_tokens_between_consecutive_chunks_of_one_forward(tmp_path, model_dir, head):
    tok = head[1]
    docs = corpus(6)
    write_jsonl(tmp_path / "d.jsonl", [{"text": d} for d in docs])
    run(model_dir, tmp_path / "d.jsonl", tmp_path / "out", chunking="late", chunk_tokens=5, chunk_overlap=2)
    table = pq.read_table(tmp_path / "out").to_pylist()
    for i, doc in enumerate(docs):
        rows = [r for r in table if r["id"] == f"d.jsonl:{i + 1}"]
        enc = tok(doc, return_offsets_mapping=True)
        n, offsets = len(enc["input_ids"]), enc["offset_mapping"]  # text tokens 1 .. n-2: [CLS] ... [SEP]
        ranges = [(1, min(6, n - 1))]
        while ranges[-1][1] < n - 1:  # each chunk starts 5 - 2 = 3 tokens after the previous, until the last token
            start = ranges[-1][0] + 3
            ranges.append((start, min(start + 5, n - 1)))
        assert [(r["char_start"], r["char_end"]) for r in rows] == [(offsets[a][0], offsets[b - 1][1])
                                                                      for a, b in ranges]
        assert [r["n_tokens"] for r in rows] == [b - a for a, b in ranges]
        torch.testing.assert_close(torch.tensor([r["vector"] for r in rows]), by_hand(head, doc, ranges),
                                   rtol=0, atol=1e-5)
    for bad in ({"chunk_overlap": 5}, {"chunk_overlap": -1}):
        with pytest.raises(ValueError, match=r"--chunk-overlap must be at least 0 and less than --chunk-tokens \(5\)"):
            EmbedOptions(chunking="late", chunk_tokens=5, **bad)
    with pytest.raises(ValueError, match="--chunk-overlap applies with --chunking late --chunk-tokens"):
        EmbedOptions(chunking="late", chunk_spans_column="spans", chunk_overlap=1)


def test_shards_are_cut_by_tokens_and_a_killed_job_resumes_them(tmp_path, model_dir, monkeypatch):
    from avey_b.apps.embed.options import DEFAULT_SHARD_TOKENS, embed_parser

    docs = corpus(14)
    write_jsonl(tmp_path / "d.jsonl", [{"text": d} for d in docs])
    lengths = [len(ids) for ids in head_lengths(model_dir, docs)]
    expected, tokens = [[]], 0  # consecutive documents of at most 50 tokens in all; a longer one alone
    for n in lengths:
        if expected[-1] and tokens + n > 50:
            expected.append([])
            tokens = 0
        expected[-1].append(n)
        tokens += n
    assert max(lengths) > 50 and len(expected) >= 4 and {1, 3} <= {len(g) for g in expected}

    whole = run(model_dir, tmp_path / "d.jsonl", tmp_path / "whole", shard_size=None, shard_tokens=50)
    assert [s["tokens"] for s in whole["shards"]] == [sum(g) for g in expected]
    assert [s["documents"] for s in whole["shards"]] == [len(g) for g in expected]

    write, written = shards.write_shard, []

    def killed_after_two(path, table):
        if len(written) == 2:
            raise Killed
        written.append(path.name)
        write(path, table)

    monkeypatch.setattr(shards, "write_shard", killed_after_two)
    with pytest.raises(Killed):
        run(model_dir, tmp_path / "d.jsonl", tmp_path / "out", shard_size=None, shard_tokens=50)
    monkeypatch.setattr(shards, "write_shard", write)
    resumed = run(model_dir, tmp_path / "d.jsonl", tmp_path / "out", shard_size=None)  # the recorded 50 is kept
    assert [(r["shards_found"], r["shards_written"]) for r in resumed["runs"]] == [(0, 2), (2, len(expected) - 2)]
    assert pq.read_table(tmp_path / "out").equals(pq.read_table(tmp_path / "whole"))
    with pytest.raises(ValueError, match="shard_tokens: 50 then, 100 now"):
        run(model_dir, tmp_path / "d.jsonl", tmp_path / "out", shard_size=None, shard_tokens=100)

    default = run(model_dir, tmp_path / "d.jsonl", tmp_path / "default", shard_size=None)
    assert default["settings"]["shard_tokens"] == DEFAULT_SHARD_TOKENS and default["settings"]["shard_size"] is None
    args = embed_parser().parse_args(["m", "i", "o", "--keep-columns", "a,b", "c", "--shard-tokens", "5000"])
    assert (args.keep_columns, args.shard_tokens, args.shard_size) == (("a,b", "c"), 5000, None)
    assert EmbedOptions(keep_columns=args.keep_columns).keep_columns == ("a", "b", "c")  # a,b,c or a b c


def test_the_recorded_settings_are_the_options_of_the_same_names_and_the_resolved_values():
    """The manifest's settings take the options that change a vector or the layout from EmbedOptions by name (no
    second list to drift): each recorded name is an option and a setting, and every other setting is a hash, the
    input's name or a value resolved at the first run."""
    import dataclasses

    from avey_b.apps.embed.options import EmbedOptions
    from avey_b.apps.embed.shards import RECORDED_OPTIONS, Settings

    options = {f.name for f in dataclasses.fields(EmbedOptions)}
    settings = {f.name for f in dataclasses.fields(Settings)}
    assert set(RECORDED_OPTIONS) <= options & settings
    resolved = {"model_sha256", "tokenizer_sha256", "input_sha256", "hf_dataset", "shard_size", "max_tokens",
                "precision", "shard_tokens"}
    assert settings == set(RECORDED_OPTIONS) | resolved
