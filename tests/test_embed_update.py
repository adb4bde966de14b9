"""``avey-b embed --update``: each action (skip, append, edit, new, remove) gives the vectors and the layout of a
fresh run of the new corpus, pooled and with late chunks; the manifest records what was done; an update that
crashes leaves the old output readable and a rerun completes it; where a document cannot be encoded in pieces the
start line says so and changed documents are encoded again in full; long documents take the bounded-memory path
with today's vectors.

The model reads a vocabulary of thousands of words (random text has no near-ties between the ranker's candidates:
tests/test_streaming.py's docstring), with a WordPiece tokenizer whose words grow by appended characters (``w12``
then ``w123``: an append that re-tokenizes the old tail)."""

import json
import random

import pytest
import torch

from avey_b import AveyBForSentenceEmbedding
from avey_b.apps.embed import MANIFEST, EmbedOptions, embed_corpus, shards, streamed
from avey_b.inference.options import LoadOptions
from avey_b.model import presets
from avey_b.testing import seeded

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

WORDS = [f"w{i}" for i in range(3000)]


@pytest.fixture(scope="module")
def wide_model(tmp_path_factory):
    """A tiny Avey-B (S = 4) over a WordPiece vocabulary of 3,000 words, saved with its tokenizer."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    directory = tmp_path_factory.mktemp("wide")
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    pieces = list("w0123456789") + [f"##{c}" for c in "0123456789"]
    vocab = {t: i for i, t in enumerate(dict.fromkeys(specials + WORDS + pieces))}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]")
    fast.save_pretrained(directory)
    seeded(AveyBForSentenceEmbedding, presets.tiny(vocab_size=len(vocab))).save_pretrained(directory)
    return directory


def text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS[100:]) for _ in range(n))


def versions(seed: int = 0) -> tuple[list[dict], list[dict]]:
    """A corpus and its next version: one document of each action, the others unchanged."""
    rng = random.Random(seed)
    old = [{"id": f"d{i}", "text": text(rng, n)} for i, n in enumerate([30, 41, 7, 60, 25, 12, 33, 18, 50])]
    old[2]["text"] += " w12"  # the appended text makes this word w123: the old tail is tokenized otherwise
    new = [dict(r) for r in old]
    new[1]["text"] += " " + text(rng, 9)  # appended
    new[2]["text"] += "3 " + text(rng, 5)  # appended, the tail re-tokenized
    words = new[3]["text"].split()
    words[30] = "w77"
    new[3]["text"] = " ".join(words)  # edited in place: one token changed
    new[4]["text"] = text(rng, 3) + " " + new[4]["text"][12:]  # edited, the length changed
    del new[5]  # removed
    new.insert(6, {"id": "n0", "text": text(rng, 21)})  # new
    return old, new


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def run(model_dir, source, out, **kw):
    kw = {"load": LoadOptions(precision="fp32"), "shard_tokens": 120, "max_batch_tokens": 96, "progress": False,
          **kw}
    return embed_corpus(str(model_dir), str(source), str(out), EmbedOptions(**kw))


def assert_same_output(got, fresh):
    """The same rows and layout as a fresh run, the vectors within 1e-5."""
    a, b = pq.read_table(got), pq.read_table(fresh)
    assert a.drop(["vector"]).equals(b.drop(["vector"]))
    assert sorted(p.name for p in got.glob("part-*")) == sorted(p.name for p in fresh.glob("part-*"))
    torch.testing.assert_close(torch.tensor(a["vector"].to_pylist()), torch.tensor(b["vector"].to_pylist()),
                               rtol=0, atol=1e-5)


@pytest.mark.parametrize("chunks", [{}, {"chunking": "late", "chunk_tokens": 5, "chunk_overlap": 2}],
                         ids=["pooled", "late"])
def test_each_action_gives_the_vectors_of_a_fresh_run(tmp_path, wide_model, chunks, capsys, monkeypatch):
    from avey_b.inference.encoder import Encoder
    from avey_b.inference.runtimes import EagerRuntime

    old, new = versions()
    write_jsonl(tmp_path / "v1.jsonl", old)
    write_jsonl(tmp_path / "v2.jsonl", new)
    first = run(wide_model, tmp_path / "v1.jsonl", tmp_path / "out", update=True, **chunks)
    assert first["runs"][-1]["update"]["documents"] == {"skipped": 0, "appended": 0, "edited": 0, "new": 9,
                                                        "removed": 0}
    assert "--update keeps each document's state in _state/" in capsys.readouterr().err
    run(wide_model, tmp_path / "v1.jsonl", tmp_path / "fresh1", **chunks)
    assert_same_output(tmp_path / "out", tmp_path / "fresh1")

    tokenized, tokenize = [], Encoder.tokenize
    monkeypatch.setattr(Encoder, "tokenize", lambda self, texts, *a, **kw: (tokenized.extend(texts),
                                                                            tokenize(self, texts, *a, **kw))[1])
    manifest = run(wide_model, tmp_path / "v2.jsonl", tmp_path / "out", update=True, **chunks)
    changed = {r["text"] for r in new} - {r["text"] for r in old}
    assert len(changed) == 5 and set(tokenized) == changed  # the unchanged documents: their recorded tokens
    monkeypatch.undo()
    run(wide_model, tmp_path / "v2.jsonl", tmp_path / "fresh2", **chunks)
    assert_same_output(tmp_path / "out", tmp_path / "fresh2")
    done = manifest["runs"][-1]["update"]
    assert done["documents"] == {"skipped": 4, "appended": 2, "edited": 2, "new": 1, "removed": 1}
    assert done["tokens_total"] == manifest["counts"]["tokens"]
    assert 0 < done["tokens_computed"] < done["tokens_total"] / 2  # the changed splits, not the corpus
    assert done["changed_documents"] == "computed in pieces"
    assert manifest["settings"]["input_sha256"] != first["settings"]["input_sha256"]
    on_disk = json.loads((tmp_path / "out" / MANIFEST).read_text())
    assert on_disk["status"] == "complete" and on_disk["state"]["bytes"] == sum(
        p.stat().st_size for p in (tmp_path / "out" / "_state").iterdir()) > 0
    assert sorted(p.name for p in (tmp_path / "out" / "_state").iterdir()) == sorted(
        p.name for p in (tmp_path / "out").glob("part-*"))
    assert not (tmp_path / "out" / ".update").exists()

    S, d = 4, AveyBForSentenceEmbedding.config_class.from_pretrained(wide_model).hidden_size
    for row in pq.read_table(tmp_path / "out" / "_state").to_pylist():  # the sums kept per 1,024 tokens
        assert row["n_tokens"] == len(row["ids"]) and row["sum_splits"] == [1024 // S]
        assert len(row["sums"]) == d * -(-(len(row["ids"]) // S) // (1024 // S))

    def untouched(*args, **kw):
        raise AssertionError("an unchanged corpus needs no tokenizer and no weights")

    monkeypatch.setattr(Encoder, "tokenize", untouched)
    monkeypatch.setattr(EagerRuntime, "load", untouched)
    again = run(wide_model, tmp_path / "v2.jsonl", tmp_path / "out", update=True, **chunks)  # nothing changed
    monkeypatch.undo()
    assert again["runs"][-1]["update"]["documents"]["skipped"] == len(new)
    assert again["runs"][-1]["update"]["tokens_computed"] == 0
    assert again["runs"][-1]["update"]["shards"]["written"] == 0
    assert_same_output(tmp_path / "out", tmp_path / "fresh2")


def test_an_append_computes_only_the_new_splits(tmp_path, wide_model):
    rng = random.Random(3)
    long = text(rng, 400)
    write_jsonl(tmp_path / "v1.jsonl", [{"id": "a", "text": long}])
    write_jsonl(tmp_path / "v2.jsonl", [{"id": "a", "text": long + " " + text(rng, 10)}])
    run(wide_model, tmp_path / "v1.jsonl", tmp_path / "out", update=True)
    done = run(wide_model, tmp_path / "v2.jsonl", tmp_path / "out", update=True)["runs"][-1]["update"]
    assert done["documents"]["appended"] == 1 and done["tokens_total"] == 412
    assert done["tokens_computed"] <= 16  # the split of the old [SEP], the new ones and the partial last
    run(wide_model, tmp_path / "v2.jsonl", tmp_path / "fresh")
    assert_same_output(tmp_path / "out", tmp_path / "fresh")


def test_states_saved_before_their_tokens_and_grouping_still_update(tmp_path, wide_model, monkeypatch):
    """Records of an earlier version (per-split sums, no n_tokens or sum_splits columns) are read, rewritten beside
    new ones, and read again by the next update: the same vectors as a fresh run each time."""
    old, new = versions(7)
    for name, rows in (("v1", old), ("v2", new), ("v3", [dict(r) for r in new])):
        write_jsonl(tmp_path / f"{name}.jsonl", rows)
    states = streamed.States  # the sums one per split, as they were saved before
    monkeypatch.setattr(streamed, "States", lambda encoder, sum_splits, **kw: states(encoder, sum_splits=1, **kw))
    run(wide_model, tmp_path / "v1.jsonl", tmp_path / "out", update=True)
    monkeypatch.undo()
    for path in (tmp_path / "out" / "_state").glob("part-*.parquet"):  # the columns an earlier version lacked
        table = pq.read_table(path)
        pq.write_table(table.drop(["n_tokens", "sum_splits"]).replace_schema_metadata(table.schema.metadata), path)
    run(wide_model, tmp_path / "v2.jsonl", tmp_path / "out", update=True)
    run(wide_model, tmp_path / "v2.jsonl", tmp_path / "fresh2")
    assert_same_output(tmp_path / "out", tmp_path / "fresh2")
    v3 = [json.loads(line) for line in (tmp_path / "v3.jsonl").read_text().splitlines()]
    v3[0]["text"] += " w5"  # an unchanged document of v2, its record rewritten from the earlier version's
    write_jsonl(tmp_path / "v3.jsonl", v3)
    done = run(wide_model, tmp_path / "v3.jsonl", tmp_path / "out", update=True)["runs"][-1]["update"]
    assert done["documents"]["appended"] == 1 and done["tokens_computed"] < done["tokens_total"] / 4
    run(wide_model, tmp_path / "v3.jsonl", tmp_path / "fresh3")
    assert_same_output(tmp_path / "out", tmp_path / "fresh3")


class Crash(Exception):
    pass


def test_a_crash_mid_update_leaves_the_old_output_and_a_rerun_completes_it(tmp_path, wide_model, monkeypatch):
    old, new = versions(1)
    write_jsonl(tmp_path / "v1.jsonl", old)
    write_jsonl(tmp_path / "v2.jsonl", new)
    run(wide_model, tmp_path / "v1.jsonl", tmp_path / "out", update=True, shard_tokens=60)
    before, manifest = pq.read_table(tmp_path / "out"), (tmp_path / "out" / MANIFEST).read_text()

    write, written = shards.write_shard, []

    def crash_on_the_third(path, table):
        if len(written) == 2:
            raise Crash
        written.append(path)
        write(path, table)

    monkeypatch.setattr(shards, "write_shard", crash_on_the_third)
    with pytest.raises(Crash):
        run(wide_model, tmp_path / "v2.jsonl", tmp_path / "out", update=True, shard_tokens=60)
    assert pq.read_table(tmp_path / "out").equals(before)  # the old output, whole and alone
    assert (tmp_path / "out" / MANIFEST).read_text() == manifest
    assert [p.parent.name for p in written] == ["_state", ".update"]  # a shard's records, then the shard

    monkeypatch.setattr(shards, "write_shard", write)
    done = run(wide_model, tmp_path / "v2.jsonl", tmp_path / "out", update=True, shard_tokens=60)
    assert done["runs"][-1]["update"]["shards"]["found_staged"] == 1
    assert done["runs"][-1]["update"]["tokens_computed_staged"] > 0  # by the update that stopped, said apart
    assert done["runs"][-1]["update"]["documents"] | {"skipped": 0} == {
        "skipped": 0, "appended": 2, "edited": 2, "new": 1, "removed": 1}
    run(wide_model, tmp_path / "v2.jsonl", tmp_path / "fresh", shard_tokens=60)
    assert_same_output(tmp_path / "out", tmp_path / "fresh")


def test_a_crash_during_the_renames_is_finished_by_the_next_run(tmp_path, wide_model, monkeypatch):
    from avey_b.apps.embed import job

    old, new = versions(2)
    write_jsonl(tmp_path / "v1.jsonl", old)
    write_jsonl(tmp_path / "v2.jsonl", new)
    run(wide_model, tmp_path / "v1.jsonl", tmp_path / "out", update=True)
    monkeypatch.setattr(job, "put_in_place", lambda out, manifest: (_ for _ in ()).throw(Crash()))
    with pytest.raises(Crash):  # committed (the manifest staged), nothing renamed yet
        run(wide_model, tmp_path / "v2.jsonl", tmp_path / "out", update=True)
    assert (tmp_path / "out" / ".update" / MANIFEST).exists()
    monkeypatch.undo()
    run(wide_model, tmp_path / "v2.jsonl", tmp_path / "out")  # any run into OUTPUT finishes it first
    run(wide_model, tmp_path / "v2.jsonl", tmp_path / "fresh")
    assert_same_output(tmp_path / "out", tmp_path / "fresh")


@pytest.mark.parametrize("case", ["spans", "bidirectional"])
def test_where_pieces_do_not_apply_changed_documents_are_encoded_whole(tmp_path, wide_model, case, capsys):
    model_dir, options = wide_model, {}
    old, new = versions(4)
    if case == "spans":
        for r in old + new:
            r["spans"] = [[0, len(r["text"]) // 2], [len(r["text"]) // 2, len(r["text"])]]
        options = {"chunking": "late", "chunk_spans_column": "spans"}
        words = "character-span chunks"
    else:
        model_dir = tmp_path / "bidirectional"
        config = presets.tiny(vocab_size=AveyBForSentenceEmbedding.from_pretrained(wide_model).config.vocab_size,
                              ranker="bidirectional")
        seeded(AveyBForSentenceEmbedding, config).save_pretrained(model_dir)
        for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
            if (wide_model / name).exists():
                (model_dir / name).write_bytes((wide_model / name).read_bytes())
        words = "ranker='bidirectional'"
    write_jsonl(tmp_path / "v1.jsonl", old)
    write_jsonl(tmp_path / "v2.jsonl", new)
    run(model_dir, tmp_path / "v1.jsonl", tmp_path / "out", update=True, **options)
    capsys.readouterr()
    manifest = run(model_dir, tmp_path / "v2.jsonl", tmp_path / "out", update=True, **options)
    line = [x for x in capsys.readouterr().err.splitlines() if x.startswith("PyTorch on cpu")]  # the start line
    assert len(line) == 1 and "a changed document is encoded again in full" in line[0] and words in line[0]
    done = manifest["runs"][-1]["update"]
    assert done["changed_documents"].startswith("encoded again in full") and words in done["changed_documents"]
    assert done["documents"]["skipped"] == 4 and done["documents"]["removed"] == 1
    run(model_dir, tmp_path / "v2.jsonl", tmp_path / "fresh", **options)
    assert_same_output(tmp_path / "out", tmp_path / "fresh")


@pytest.mark.parametrize("chunks", [{}, {"chunking": "late", "chunk_tokens": 7, "chunk_overlap": 3}],
                         ids=["pooled", "late"])
def test_long_documents_are_encoded_in_pieces_with_todays_vectors(tmp_path, wide_model, monkeypatch, chunks, capsys):
    rng = random.Random(5)
    write_jsonl(tmp_path / "d.jsonl", [{"id": f"d{i}", "text": text(rng, n)} for i, n in enumerate([90, 10, 130])])
    run(wide_model, tmp_path / "d.jsonl", tmp_path / "whole", **chunks)
    encoded, encode = [], streamed.Pieces.encode
    monkeypatch.setattr(streamed.Pieces, "encode", lambda self, ids, *a: (encoded.append(len(ids)),
                                                                          encode(self, ids, *a))[1])
    run(wide_model, tmp_path / "d.jsonl", tmp_path / "pieces", long_document_tokens=64, **chunks)
    assert sorted(encoded) == [92, 132]
    assert "documents over 64 tokens are encoded in pieces" in capsys.readouterr().err
    assert_same_output(tmp_path / "pieces", tmp_path / "whole")


def test_the_command_says_what_the_update_did(tmp_path, wide_model, capsys):
    from avey_b import cli

    old, new = versions(6)
    write_jsonl(tmp_path / "v1.jsonl", old)
    write_jsonl(tmp_path / "v2.jsonl", new)
    command = ["embed", str(wide_model), None, str(tmp_path / "out"), "--precision", "fp32", "--no-progress"]
    assert cli.main([*command[:2], str(tmp_path / "v1.jsonl"), *command[3:]]) == 0  # a plain run: no states
    assert cli.main([*command[:2], str(tmp_path / "v2.jsonl"), *command[3:]]) != 0
    assert "(or --update: bring it to the new input" in capsys.readouterr().err
    assert cli.main([*command[:2], str(tmp_path / "v2.jsonl"), *command[3:], "--update"]) == 0
    assert "updated: 0 skipped, 0 appended, 0 edited, 9 new, 0 removed" in capsys.readouterr().out
    assert cli.main([*command[:2], str(tmp_path / "v1.jsonl"), *command[3:], "--update"]) == 0
    out = capsys.readouterr().out
    assert "updated: 4 skipped, 0 appended, 4 edited, 1 new, 1 removed document(s); " in out  # back to v1
    assert "bytes beside" in out
    with pytest.raises(ValueError, match="--update runs on the local backend"):
        EmbedOptions(update=True, backend="ray")
