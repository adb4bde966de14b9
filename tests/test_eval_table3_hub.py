"""Table 3's datasets as the Hugging Face Hub holds them (what EncodEval's ``datasets.py`` reads and renames), built
here as in-memory ``datasets.Dataset``s with the same columns and features: CoNLL-2003's ``words``/``ner``, UNER's
``ner_tags`` beside ``idx``/``text``/``annotator``, ClassLabel and plain-integer tags; QA rows without ``id``,
without an answer, with white space around the context, with an answer off its offset. No network."""

from types import SimpleNamespace

import datasets
import pytest
import torch

from avey_b import testing as toy
from avey_b.evaluation import finetune
from avey_b.evaluation.tasks import DataFiles, RunConfig, base, get_task, qa

CONLL_NAMES = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"]
UNER_NAMES = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC"]
PAPER = RunConfig(protocol="paper", max_length=None)


@pytest.fixture
def hub(monkeypatch):
    tables = {}

    def fake_load_hub(name, config, split):
        if (name, config, split) not in tables:
            raise AssertionError(f"unexpected Hub request {(name, config, split)}")
        return tables[(name, config, split)]

    monkeypatch.setattr(base, "load_hub", fake_load_hub)
    return tables


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return toy.tokenizer(str(tmp_path_factory.mktemp("tok")))


def _sequence(feature):
    return datasets.Sequence(feature)


# ------------------------------------------------------------------------------------------ TC


def test_conll2003_reads_words_and_ner_as_the_hub_holds_them(hub, tok):
    """``hgissbkh/conll2003-en``: EncodEval renames ``words`` -> ``tokens`` and ``ner`` -> ``tags``."""
    features = datasets.Features({"words": _sequence(datasets.Value("string")),
                                  "ner": _sequence(datasets.ClassLabel(names=CONLL_NAMES))})
    hub[("hgissbkh/conll2003-en", None, "test")] = datasets.Dataset.from_dict(
        {"words": [["EU", "rejects", "German", "call"], ["Peter", "Blackburn"]], "ner": [[3, 0, 7, 0], [1, 2]]},
        features=features)
    task = get_task("conll2003")
    examples = task.load("eval", DataFiles(), protocol="paper")
    assert [e["tokens"] for e in examples] == [["EU", "rejects", "German", "call"], ["Peter", "Blackburn"]]
    assert [e["source_tags"] for e in examples] == [["B-ORG", "O", "B-MISC", "O"], ["B-PER", "I-PER"]]
    # the paper protocol's label ids are the dataset's: its 9 classes in their order (EncodEval: num_labels 9)
    kwargs = task.model_kwargs(examples, examples, PAPER)
    assert kwargs["num_labels"] == 9 and list(kwargs["id2label"].values()) == CONLL_NAMES
    task.end_token = "[UNK]"
    feats = task.train_features(examples, tok, PAPER)
    assert {y for y in feats[0]["labels"] if y != -100} == {3, 0, 7}  # the class ids, as EncodEval trains on them
    # the standard protocol reads the same columns (IOB2, seqeval)
    assert get_task("conll2003").load("eval", DataFiles())[1]["tags"] == ["B-PER", "I-PER"]


def test_uner_reads_ner_tags_beside_the_columns_encodeval_removes(hub):
    features = datasets.Features({"idx": datasets.Value("int64"), "text": datasets.Value("string"),
                                  "tokens": _sequence(datasets.Value("string")),
                                  "ner_tags": _sequence(datasets.ClassLabel(names=UNER_NAMES)),
                                  "annotator": datasets.Value("string")})
    hub[("hgissbkh/uner_en", None, "train")] = datasets.Dataset.from_dict(
        {"idx": [0], "text": ["Ada lives in Leeds"], "tokens": [["Ada", "lives", "in", "Leeds"]],
         "ner_tags": [[1, 0, 0, 5]], "annotator": ["a"]}, features=features)
    task = get_task("uner")
    examples = task.load("train", DataFiles(), protocol="paper")
    assert examples == [{"tokens": ["Ada", "lives", "in", "Leeds"], "tags": ["B-PER", "O", "O", "B-LOC"],
                         "source_tags": ["B-PER", "O", "O", "B-LOC"]}]
    assert task.labels(examples, [], PAPER) == UNER_NAMES  # 7 labels, as EncodEval's UNER config


def test_integer_tags_without_names_are_encodevals_ids_under_the_paper_protocol_only(hub, tok):
    """A tags column of plain integers (no ClassLabel names): EncodEval trains on the ids as they are, with its
    config's num_labels (CoNLL-2003: 9); the standard protocol's entity F1 needs names, so it stops and says why."""
    features = datasets.Features({"words": _sequence(datasets.Value("string")),
                                  "ner": _sequence(datasets.Value("int64"))})
    hub[("hgissbkh/conll2003-en", None, "train")] = datasets.Dataset.from_dict(
        {"words": [["alice", "met", "bob"]], "ner": [[1, 0, 1]]}, features=features)
    with pytest.raises(ValueError, match=r"integer tags without class names .* --protocol paper"):
        get_task("conll2003").load("train", DataFiles())
    task = get_task("conll2003")
    examples = task.load("train", DataFiles(), protocol="paper")
    assert examples[0]["source_tags"] == ["1", "0", "1"]
    assert task.labels(examples, [], PAPER) == [str(i) for i in range(9)]
    task.model_kwargs(examples, [], PAPER)
    task.end_token = "[UNK]"
    labels = task.train_features(examples, tok, PAPER)[0]["labels"]
    assert [y for y in labels if y != -100] == [1, 0, 1]  # alice met bob: the dataset's ids (+ the end token's -100)
    hub[("hgissbkh/conll2003-en", None, "train")] = datasets.Dataset.from_dict(
        {"words": [["Ada"]], "ner": [[9]]}, features=features)
    with pytest.raises(ValueError, match="row 0: tag id 9 outside the 9 labels"):
        get_task("conll2003").load("train", DataFiles(), protocol="paper")


# ------------------------------------------------------------------------------------------ QA


def _squad_rows(rows, with_id=True):
    columns = {"question": [r[0] for r in rows], "context": [r[1] for r in rows],
               "answers": [{"text": [r[2]] if r[2] else [], "answer_start": [r[3]] if r[2] else []} for r in rows]}
    if with_id:
        columns = {"id": [str(i) for i in range(len(rows))], "title": ["t"] * len(rows), **columns}
    answers = datasets.Sequence({"text": datasets.Value("string"), "answer_start": datasets.Value("int32")})
    features = datasets.Features({**({"id": datasets.Value("string"), "title": datasets.Value("string")}
                                     if with_id else {}),
                                  "question": datasets.Value("string"), "context": datasets.Value("string"),
                                  "answers": answers})
    return datasets.Dataset.from_dict(columns, features=features)


def test_qa_rows_need_no_id_under_the_paper_protocol(hub):
    hub[("hgissbkh/record", None, "validation")] = _squad_rows([("who ?", "alice met bob", "alice", 0)],
                                                               with_id=False)
    examples = get_task("record").load("eval", DataFiles(), protocol="paper")
    assert examples[0]["answers"] == [{"text": "alice", "start": 0}]
    with pytest.raises(ValueError, match="row 0 has no 'id' column"):
        get_task("record").load("eval", DataFiles())


def test_answerless_training_rows_are_kept_and_split_as_encodeval_splits(hub, tok):
    """EncodEval keeps a training row without an answer (labelled all 0) and draws its 95% from the whole split;
    the standard protocol drops such rows from SQuAD's and ReCoRD's training."""
    rows = [("who ?", f"alice met bob {i}", "alice" if i % 4 else "", 0) for i in range(20)]
    hub[("hgissbkh/record", None, "train")] = _squad_rows(rows, with_id=False)
    hub[("hgissbkh/record", None, "validation")] = _squad_rows(rows[:2], with_id=False)
    task = get_task("record")
    train, _ = finetune.load_data(task, DataFiles(), RunConfig(protocol="paper"))
    index = datasets.Dataset.from_dict({"i": list(range(20))}).train_test_split(train_size=0.95, seed=42)
    assert [e["context"] for e in train] == [f"alice met bob {i}" for i in index["train"]["i"]]  # 19 of the 20
    task.end_token = "[UNK]"
    empty = next(e for e in train if not e["answers"])
    assert set(task.train_features([empty], tok, PAPER)[0]["labels"]) == {0}
    hub[("hgissbkh/record", None, "train")] = _squad_rows(rows)
    hub[("hgissbkh/record", None, "validation")] = _squad_rows(rows[:2])
    train, _ = finetune.load_data(get_task("record"), DataFiles(), RunConfig())
    assert len(train) == 15 and all(e["answers"] for e in train)


def test_paper_qa_strips_squad_but_not_record_and_keeps_the_offsets(tok):
    """EncodEval's SQuAD loaders strip question and context (``strip_whitespace``) and do not move the answer's
    offset; its ReCoRD loader strips nothing."""
    example = {"id": "1", "question": "  who ? ", "context": "  alice met bob", "answers": [{"text": "alice",
                                                                                               "start": 2}]}
    assert qa.paper_example(example, strip=True) == ("who ?", "alice met bob", {"text": "alice", "start": 2})
    assert qa.paper_example(example, strip=False) == ("  who ? ", "  alice met bob", {"text": "alice", "start": 2})
    squad, record = get_task("squad"), get_task("record")
    squad.end_token = record.end_token = "[UNK]"
    for task, marked in ((squad, ["alice", "met"]), (record, ["alice"])):
        f = task.train_features([example], tok, PAPER)[0]
        tokens = tok.convert_ids_to_tokens(f["input_ids"])
        # SQuAD: the unmoved offset 2 now points into "alice met"; ReCoRD: the context as given, the answer in place
        assert [t for t, y in zip(tokens, f["labels"], strict=True) if y == 1] == marked, task.name


def test_a_misplaced_answer_is_counted_under_the_paper_protocol_and_refused_otherwise(hub):
    hub[("rajpurkar/squad", None, "validation")] = _squad_rows([("who ?", "alice met bob", "alice", 4),
                                                                ("who ?", "alice met bob", "bob", 10)])
    task = get_task("squad")
    assert len(task.load("eval", DataFiles(), protocol="paper")) == 2
    assert task.misplaced_answers == {"eval": 1}
    with pytest.raises(ValueError, match="answer 'alice' is not at character 4"):
        get_task("squad").load("eval", DataFiles())


def test_paper_labels_follow_encodevals_loops():
    """Hand-written offsets: the start is the last context token beginning at or before the answer (an answer
    starting before the first context token puts it on the prompt's last token, as EncodEval's loop does), the end
    the first token after which every token ends at or past the answer's end."""
    seq = [0, 0, 1, 1, 1, 1]
    offsets = [(0, 9), (9, 17), (0, 5), (6, 9), (10, 13), (14, 19)]  # prompt, prompt, alice met bob paris
    assert qa.paper_answer_labels(offsets, seq, {"text": "met bob", "start": 6}) == [0, 0, 0, 1, 1, 0]
    assert qa.paper_answer_labels(offsets, seq, {"text": "et b", "start": 7}) == [0, 0, 0, 1, 1, 0]
    assert qa.paper_answer_labels(offsets, seq, None) == [0] * 6
    assert qa.paper_answer_labels(offsets, seq, {"text": "xy", "start": 30}) == [0] * 6  # past the (cut) context
    shifted = [(0, 9), (9, 17), (2, 7), (8, 11), (12, 15), (16, 21)]  # a context starting at character 2
    assert qa.paper_answer_labels(shifted, seq, {"text": "ab", "start": 1}) == [0, 1, 1, 0, 0, 0]


# ------------------------------------------------------------------------------------------ QA scoring


class _AnswerTokenModel(torch.nn.Module):
    """Hand-built logits: class 1 at every position holding ``answer_id`` and at every padding position of the
    batch (``attention_mask`` 0), class 0 elsewhere."""

    def __init__(self, answer_id: int):
        super().__init__()
        self.answer_id = answer_id
        self.anchor = torch.nn.Parameter(torch.zeros(()))  # gives the harness a device

    def forward(self, input_ids, attention_mask, **_):
        one = (input_ids == self.answer_id) | (attention_mask == 0)
        logits = torch.stack([(~one).float(), one.float()], dim=-1)
        return SimpleNamespace(logits=logits)


def test_paper_qa_score_counts_predictions_at_the_padding_of_encodevals_batches(tok):
    """EncodEval reads each row of a scoring batch over its padded width (batches of 16, ReCoRD 4, padded to the
    longest), so an answer predicted at a padding position lowers the F1; ``f1_real_tokens`` reads each question's
    own tokens. Three questions whose gold answer is "alice", inputs of different lengths."""
    contexts = ["alice met bob", "alice met bob in paris", "bob met alice in paris and bob met carol in london"]
    examples = [{"id": str(i), "question": "who ?", "context": c,
                 "answers": [{"text": "alice", "start": c.index("alice")}]}
                for i, c in enumerate(contexts)]
    task = get_task("squad")
    task.end_token = "[UNK]"
    lengths = [len(f["input_ids"]) for f in task._paper_features(examples, tok, PAPER)]
    assert len(set(lengths)) == 3
    model = _AnswerTokenModel(tok.convert_tokens_to_ids("alice"))

    def expected(batch: int) -> float:  # gold {alice}; predicted {alice} + the row's padding positions
        scores = []
        for start in range(0, 3, batch):
            width = max(lengths[start:start + batch])
            scores += [2 / (2 + width - n) for n in lengths[start:start + batch]]
        return 100 * sum(scores) / 3

    for batch in (16, 2, 1):
        cfg = RunConfig(protocol="paper", max_length=None, eval_batch_size=batch)
        scores = task.evaluate(model, tok, examples, cfg)
        assert scores["f1"] == pytest.approx(expected(batch)), batch
        assert scores["f1_real_tokens"] == pytest.approx(100.0)
        assert f"({batch} questions, padded to the longest)" in scores["scoring"]
    assert expected(16) < expected(2) < expected(1) == 100.0
    # by hand for batch 16: the shortest two rows carry (width - n) padding predictions each
    width = max(lengths)
    assert expected(16) == pytest.approx(100 * sum(2 / (2 + width - n) for n in lengths) / 3)
    # the protocol's table gives QA its batches: 16, ReCoRD 4
    from avey_b.evaluation.protocol import protocol_settings

    assert protocol_settings("squad", "paper")["eval_batch_size"] == 16
    assert protocol_settings("record", "paper")["eval_batch_size"] == 4


def test_padded_answer_positions_reads_the_row_or_its_own_tokens():
    from avey_b.evaluation.metrics import padded_answer_positions, token_set_f1

    row = [0, 1, 1, 0, 1, 1]  # 4 real tokens, 2 padding positions predicted 1
    assert padded_answer_positions(row, None) == [1, 2, 4, 5]
    assert padded_answer_positions(row, 4) == [1, 2]
    assert token_set_f1(padded_answer_positions(row, None), [1, 2]) == pytest.approx(2 * 2 / (4 + 2))
