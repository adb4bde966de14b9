"""The Hugging Face Hub code paths of every family, on in-memory ``datasets`` objects (no network)."""

import datasets
import pytest

from avey_b.evaluation.tasks import DataFiles, RunConfig, base, get_task


@pytest.fixture
def hub(monkeypatch):
    tables = {}

    def fake_load_hub(name, config, split):
        key = (name, config, split)
        if key not in tables:
            raise AssertionError(f"unexpected Hub request {key}")
        return tables[key]

    monkeypatch.setattr(base, "load_hub", fake_load_hub)
    return tables


def test_glue_names_and_splits(hub):
    hub[("nyu-mll/glue", "mnli", "validation_matched")] = datasets.Dataset.from_dict(
        {"premise": ["a"], "hypothesis": ["b"], "label": [2], "idx": [0]})
    assert get_task("mnli").load("eval", DataFiles()) == [{"text": "a", "text_pair": "b", "label": 2}]


def test_ner_class_label_names(hub):
    feats = datasets.Features({"tokens": datasets.Sequence(datasets.Value("string")),
                               "tags": datasets.Sequence(datasets.ClassLabel(names=["B-PER", "I-PER", "O"]))})
    hub[("hgissbkh/conll2003-en", None, "test")] = datasets.Dataset.from_dict(
        {"tokens": [["Ada", "Lovelace", "wrote"]], "tags": [[0, 1, 2]]}, features=feats)
    task = get_task("conll2003")
    examples = task.load("eval", DataFiles())
    assert examples == [{"tokens": ["Ada", "Lovelace", "wrote"], "tags": ["B-PER", "I-PER", "O"],
                         "source_tags": ["B-PER", "I-PER", "O"]}]
    # the paper protocol (EncodEval) keeps the dataset's class ids: its class list, in its order
    assert task.labels(examples, [], RunConfig(protocol="paper")) == ["B-PER", "I-PER", "O"]
    assert task.labels(examples, [], RunConfig()) == ["O", "B-PER", "I-PER"]
    # a split with neither words nor tags columns is refused, naming the columns it looked for
    hub[("hgissbkh/uner_en", None, "test")] = datasets.Dataset.from_dict({"sentence": ["x"], "entities": [["O"]]})
    with pytest.raises(ValueError, match=r"expected a words column \(one of \['tokens', 'words'\]\)"):
        get_task("uner").load("eval", DataFiles())


def test_squad_schema(hub):
    hub[("rajpurkar/squad_v2", None, "validation")] = datasets.Dataset.from_dict({
        "id": ["1", "2"], "title": ["t", "t"], "context": ["Bob is in Paris.", "Bob is in Paris."],
        "question": ["where?", "why?"],
        "answers": [{"text": ["Paris"], "answer_start": [10]}, {"text": [], "answer_start": []}]})
    ex = get_task("squad_v2").load("eval", DataFiles())
    assert ex[0]["answers"] == [{"text": "Paris", "start": 10}] and ex[1]["answers"] == []


def test_beir_hub_layout(hub):
    hub[("BeIR/nq", "corpus", "corpus")] = datasets.Dataset.from_dict(
        {"_id": ["d1", "d2"], "title": ["T", ""], "text": ["one", "two"]})
    hub[("BeIR/nq", "queries", "queries")] = datasets.Dataset.from_dict({"_id": ["q1"], "text": ["what"]})
    hub[("BeIR/nq-qrels", None, "test")] = datasets.Dataset.from_dict(
        {"query-id": ["q1"], "corpus-id": ["d2"], "score": [1]})
    rs = get_task("nq").load("eval", DataFiles())
    assert rs.corpus == {"d1": "T one", "d2": "two"} and rs.qrels == {"q1": {"d2": 1.0}}
    hub[("hgissbkh/msmarco-pairs", None, "train")] = datasets.Dataset.from_dict(
        {"query": ["q"], "positive": ["p"]})
    assert get_task("msmarco").load("train", DataFiles()) == [("q", "p")]


def test_every_task_reads_its_hub_splits_unless_the_user_names_others():
    from avey_b.evaluation.tasks import TASKS

    scored_on = {"mnli": "validation_matched", "qqp": "validation", "sst2": "validation", "conll2003": "test",
                 "ontonotes": "test", "uner": "test", "record": "validation", "squad": "validation",
                 "squad_v2": "validation", "mldr": "test", "msmarco": "validation", "nq": "test"}
    assert set(TASKS) == set(scored_on)
    for name, split in scored_on.items():
        task = get_task(name)
        assert (task.hub_split("train", DataFiles()), task.hub_split("eval", DataFiles())) == ("train", split)
        chosen = DataFiles(train_split="train[:10%]", eval_split="dev")
        assert (task.hub_split("train", chosen), task.hub_split("eval", chosen)) == ("train[:10%]", "dev")
