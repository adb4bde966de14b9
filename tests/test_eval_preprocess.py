"""Task preprocessing on hand-written examples: label alignment, QA windows and stitching, file readers."""

import json

import pytest
import torch

from avey_b import testing as toy
from avey_b.data.conll import read_conll
from avey_b.evaluation.tasks import DataFiles, RunConfig, get_task, ir, qa
from avey_b.finetuning import alignment


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return toy.tokenizer(str(tmp_path_factory.mktemp("tok")))


# ------------------------------------------------------------------------------------------ TC


def test_word_alignment_first_subtoken_and_every_subtoken(tok):
    words = ["Bobby", "met", "Alice", "in", "Paris"]
    enc = tok(" ".join(words), return_offsets_mapping=True)
    pieces = tok.convert_ids_to_tokens(enc["input_ids"])
    assert pieces[1:4] == ["bob", "##b", "##y"]  # the toy WordPiece splits the unseen word
    word_ids = alignment.word_index_of_tokens(words, enc["offset_mapping"])
    assert word_ids == [None, 0, 0, 0, 1, 2, 3, 4, None]
    labels = [1, 0, 1, 0, 2]
    assert alignment.align_labels(word_ids, labels, every_subtoken=False) == [-100, 1, -100, -100, 0, 1, 0, 2, -100]
    assert alignment.align_labels(word_ids, labels, every_subtoken=True) == [-100, 1, 1, 1, 0, 1, 0, 2, -100]


def test_word_predictions_first_vs_vote_and_truncation():
    word_ids = [None, 0, 0, 0, 1, None]
    token_preds = [9, 2, 1, 1, 3, 9]
    assert alignment.word_predictions(word_ids, token_preds, 3, outside=0, vote=False) == [2, 3, 0]  # word 2 truncated
    assert alignment.word_predictions(word_ids, token_preds, 3, outside=0, vote=True) == [1, 3, 0]
    assert alignment.word_predictions([0, 0], [4, 2], 1, 0, vote=True) == [2]  # tie -> smallest id


def test_read_conll_docstart_iob1(tmp_path):
    path = tmp_path / "x.conll"
    path.write_text("-DOCSTART- -X- O O\n\nEU NNP I-NP I-ORG\nrejects VBZ I-VP O\n\nPeter NNP I-NP I-PER\n"
                    "Blackburn NNP I-NP I-PER\n")
    task = get_task("conll2003")
    sents = task.load("train", DataFiles(train=str(path)))
    assert sents == [{"tokens": ["EU", "rejects"], "tags": ["B-ORG", "O"], "source_tags": ["I-ORG", "O"]},
                     {"tokens": ["Peter", "Blackburn"], "tags": ["B-PER", "I-PER"], "source_tags": ["I-PER", "I-PER"]}]
    assert task.labels(sents, []) == ["O", "B-ORG", "B-PER", "I-PER"]
    (tmp_path / "bad.conll").write_text("EU\n")
    with pytest.raises(ValueError, match="bad.conll, line 1: expected 'word ... tag'"):
        read_conll(str(tmp_path / "bad.conll"))


def test_tc_training_labels_follow_protocol(tok):
    task = get_task("conll2003")
    ex = [{"tokens": ["Bobby", "met", "Alice"], "tags": ["B-PER", "O", "B-PER"]}]
    task.model_kwargs(ex, [], RunConfig())
    std = task.train_features(ex, tok, RunConfig(protocol="standard"))[0]["labels"]
    pap = task.train_features(ex, tok, RunConfig(protocol="paper"))[0]["labels"]
    assert std == [-100, 1, -100, -100, 0, 1, -100]  # [CLS] bob ##b ##y met alice [SEP]
    assert pap == [1, 1, 1, 0, 1, -100]  # EncodEval: bob ##b ##y met alice + the end token, no [CLS]/[SEP]


# ------------------------------------------------------------------------------------------ QA

CONTEXT = ("the film was good and the cast was fine and the music was great and the story was lovely "
           "and Alice Smith was in Paris today with Bob")


def _qa_example(answer="Paris", qid="q1"):
    answers = [{"text": answer, "start": CONTEXT.index(answer)}] if answer else []
    return {"id": qid, "question": "where was Alice Smith ?", "context": CONTEXT, "answers": answers}


def test_windows_cover_the_context_and_locate_the_answer(tok):
    cfg = RunConfig(max_length=24, doc_stride=6)
    ex = _qa_example()
    feats = qa.windows([ex], tok, cfg, train=True)
    assert len(feats) > 2  # the context needs several windows
    covered = set()
    for f in feats:
        assert len(f["input_ids"]) <= 24
        for o in f["offsets"]:
            if o is not None:
                covered.update(range(o[0], o[1]))
    assert {i for i, c in enumerate(CONTEXT) if not c.isspace()} <= covered
    with_answer = [f for f in feats if f["start_positions"] > 0]
    assert with_answer, "some window must contain the answer"
    for f in with_answer:
        s, e = f["start_positions"], f["end_positions"]
        assert CONTEXT[f["offsets"][s][0]:f["offsets"][e][1]] == "Paris"
    for f in feats:
        if f["start_positions"] == 0:  # windows without the whole answer point at the null position
            ctx = [o for o in f["offsets"] if o is not None]
            assert ctx[0][0] > ex["answers"][0]["start"] or ctx[-1][1] < ex["answers"][0]["start"] + 5
    # an unanswerable question trains every window on the null position
    assert all(f["start_positions"] == f["end_positions"] == 0
               for f in qa.windows([_qa_example(None)], tok, cfg, train=True))


def test_best_answer_stitches_windows_back_to_context(tok):
    cfg = RunConfig(max_length=24, doc_stride=6)
    ex = _qa_example("Alice Smith")
    feats = qa.windows([ex], tok, cfg, train=True)
    target = next(i for i, f in enumerate(feats) if f["start_positions"] > 0)
    starts, ends = [], []
    for i, f in enumerate(feats):
        s, e = torch.zeros(len(f["input_ids"])), torch.zeros(len(f["input_ids"]))
        s[0] = e[0] = 1.0  # null score 2
        if i == target:
            s[f["start_positions"]] = e[f["end_positions"]] = 5.0
            s[1] = e[1] = 9.0  # a higher-scoring span on a question token must be ignored
        starts.append(s)
        ends.append(e)
    assert qa.best_answer(CONTEXT, feats, starts, ends, 30, allow_null=False) == "Alice Smith"
    assert qa.best_answer(CONTEXT, feats, starts, ends, 30, allow_null=True) == "Alice Smith"
    # a 1-token limit rules the 2-token span out: the best remaining span is one of its tokens
    assert qa.best_answer(CONTEXT, feats, starts, ends, 1, allow_null=False) in ("Alice", "Smith")
    for s, e in zip(starts, ends, strict=False):
        s[0] = e[0] = 20.0  # the null position wins everywhere
    assert qa.best_answer(CONTEXT, feats, starts, ends, 30, allow_null=True) == ""


def test_paper_qa_labels_are_answer_positions(tok):
    task = get_task("squad")
    cfg = RunConfig(protocol="paper", max_length=64)
    f = task.train_features([_qa_example("Alice Smith")], tok, cfg)[0]
    tokens = tok.convert_ids_to_tokens(f["input_ids"])
    assert [t for t, y in zip(tokens, f["labels"], strict=True) if y == 1] == ["alice", "smith"]
    assert -100 not in f["labels"] and "[CLS]" not in tokens  # EncodEval: every token labelled, no special tokens
    nothing = task.train_features([_qa_example(None)], tok, cfg)[0]["labels"]
    assert set(nothing) == {0}


def test_read_squad_json_v2_and_bad_offsets(tmp_path):
    data = {"data": [{"paragraphs": [{"context": "Bob lives in Paris .", "qas": [
        {"id": "a", "question": "where ?", "answers": [{"text": "Paris", "answer_start": 13}]},
        {"id": "b", "question": "who ?", "answers": [], "is_impossible": True}]}]}]}
    (tmp_path / "ok.json").write_text(json.dumps(data))
    v2 = get_task("squad_v2").load("eval", DataFiles(eval=str(tmp_path / "ok.json")))
    assert [e["answers"] for e in v2] == [[{"text": "Paris", "start": 13}], []]
    assert len(get_task("squad").load("train", DataFiles(train=str(tmp_path / "ok.json")))) == 1
    data["data"][0]["paragraphs"][0]["qas"][0]["answers"][0]["answer_start"] = 3
    (tmp_path / "bad.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="answer 'Paris' is not at character 3"):
        get_task("squad").load("eval", DataFiles(eval=str(tmp_path / "bad.json")))


# ------------------------------------------------------------------------------------------ SC / IR / config


def test_glue_tsv_mnli_labels_and_holdout(tmp_path):
    (tmp_path / "mnli.tsv").write_text('index\tsentence1\tsentence2\tgold_label\n0\tA "quoted" cat\tA cat\tentailment\n'
                                       "1\tx\ty\tcontradiction\n")
    ex = get_task("mnli").load("train", DataFiles(train=str(tmp_path / "mnli.tsv")))
    assert ex == [{"text": 'A "quoted" cat', "text_pair": "A cat", "label": 0},
                  {"text": "x", "text_pair": "y", "label": 2}]
    (tmp_path / "bad.tsv").write_text("sentence\tlabel\nfine\t-1\n")
    with pytest.raises(ValueError, match="label -1 outside"):
        get_task("sst2").load("train", DataFiles(train=str(tmp_path / "bad.tsv")))
    task = get_task("sst2")
    rows = [{"label": i} for i in range(10)]
    train, held = task.split_holdout(rows, 0.3)
    assert len(held) == 3 and len(train) == 7 and not {r["label"] for r in held} & {r["label"] for r in train}
    assert task.split_holdout(rows, 0.3) == (train, held)  # the same split for every seed


def test_beir_reader_and_errors(tmp_path):
    d = toy.beir(str(tmp_path / "beir"), n_queries=6, n_docs=5)
    rs = ir.read_beir(d, "test")
    assert len(rs.corpus) == 5 and len(rs.qrels) == 3
    pairs = get_task("nq").load("train", DataFiles(train=d))
    assert len(pairs) == 3 and all(q in doc for q, doc in pairs)  # toy queries repeat their doc's words
    with pytest.raises(FileNotFoundError, match="no qrels for split 'dev'"):
        ir.read_beir(d, "dev")
    with (tmp_path / "beir" / "qrels" / "test.tsv").open("a") as f:
        f.write("q0\tmissing-doc\t1\n")
    with pytest.raises(ValueError, match="documents missing from the corpus"):
        ir.read_beir(d, "test")


def test_multiple_negatives_ranking_loss_matches_sentence_transformers_mnrl():
    q, d = torch.randn(4, 8), torch.randn(4, 8)
    cos = torch.nn.functional.cosine_similarity(q[:, None], d[None], dim=-1)
    expected = -torch.log_softmax(20 * cos, dim=1).diagonal().mean()
    assert ir.multiple_negatives_ranking_loss(q, d, 20.0).item() == pytest.approx(expected.item(), rel=1e-5)
    try:  # the library's own loss is the reference when it is installed (the eval extra)
        from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    except ImportError:
        return
    mnrl = MultipleNegativesRankingLoss(torch.nn.Identity(), scale=20.0)
    assert ir.multiple_negatives_ranking_loss(q, d, 20.0).item() == pytest.approx(
        mnrl.compute_loss_from_embeddings([q, d], None).item(), rel=1e-5)


def test_run_config_errors_name_the_field():
    with pytest.raises(ValueError, match="protocol must be one of"):
        RunConfig(protocol="encodeval")
    with pytest.raises(ValueError, match="lr must be > 0"):
        RunConfig(lr=0)
    with pytest.raises(ValueError, match="unknown task 'glue'"):
        get_task("glue")


def test_streaming_rank_equals_full_topk():
    g = torch.Generator().manual_seed(0)
    q, d = torch.randn(5, 8, generator=g), torch.randn(23, 8, generator=g)
    ids = [f"d{i}" for i in range(23)]
    full = (q @ d.T).topk(10, dim=-1).indices.tolist()
    streamed = ir.rank(q, iter(d.split(4)), ids, 10)  # 6 chunks, the last one short
    assert streamed == [[ids[j] for j in row] for row in full]
    assert ir.rank(q, iter([d[:3]]), ids[:3], 10) == [[ids[j] for j in row]
                                                      for row in (q @ d[:3].T).topk(3).indices.tolist()]
