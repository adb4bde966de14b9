"""``avey-b finetune`` on your own data: classifiers with your labels (any number of classes, multi-label,
regression), taggers with your tags (JSONL or CoNLL columns), the output directory rule and errors that name the file
and line. Tiny Avey-B built in the test, a few optimizer steps each."""

import json
import random
import re

import pytest
from transformers import AutoConfig, pipeline

from avey_b import testing as toy
from avey_b.cli import main
from avey_b.finetuning import OwnDataOptions, finetune
from avey_b.utils.files import DataFileError

ADJ = {"pos": ["good", "great", "lovely"], "neg": ["bad", "awful", "poor"], "meh": ["fine", "weak"]}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return toy.encoders(tmp_path_factory.mktemp("own"))


def reviews_csv(path, n=48, seed=0, classes=("pos", "neg", "meh")):
    rng = random.Random(seed)
    with open(path, "w") as f:
        f.write("review,sentiment\n")
        for _ in range(n):
            c = rng.choice(classes)
            f.write(f"the {rng.choice(toy._NOUNS)} was very {rng.choice(ADJ[c])},{c}\n")
    return str(path)


def common_flags(model, out):
    return ["--model", model, "--output-dir", str(out), "--lr", "3e-3", "--batch-size", "16", "--epochs", "1",
            "--device", "cpu"]


@pytest.fixture
def transformers_log():
    """What transformers logs during a test (its loggers write to a stream of their own, past pytest's capture)."""
    import logging

    class Kept(logging.Handler):
        def __init__(self):
            super().__init__()
            self.messages = []

        def emit(self, record):
            self.messages.append(record.getMessage())

        def text(self) -> str:
            text, self.messages = "\n".join(self.messages), []
            return text

    from transformers.utils import logging as transformers_logging

    # at transformers' default verbosity (warnings), whatever an earlier test in the process set it to
    kept, library, verbosity = Kept(), logging.getLogger("transformers"), transformers_logging.get_verbosity()
    transformers_logging.set_verbosity_warning()
    library.addHandler(kept)
    yield kept
    library.removeHandler(kept)
    transformers_logging.set_verbosity(verbosity)


@pytest.fixture(scope="module")
def three_class(models, tmp_path_factory):
    """A three-class classifier with string labels, trained through the command line."""
    root = tmp_path_factory.mktemp("three")
    out = root / "out"
    train = reviews_csv(root / "train.csv", 48, 0)
    assert main(["finetune", "--task", "text-classification", "--train-file", train, "--text-column", "review",
                 "--label-column", "sentiment", *common_flags(models["avey"], out)]) == 0
    return {"out": out, "train": train, "root": root}


def test_string_labels_are_the_class_names_a_pipeline_answers_with(three_class):
    out = three_class["out"]
    config = AutoConfig.from_pretrained(out)
    assert config.id2label == {0: "meh", 1: "neg", 2: "pos"} and config.label2id == {"meh": 0, "neg": 1, "pos": 2}
    answers = pipeline("text-classification", model=str(out), top_k=None)(["the film was very good"])[0]
    assert sorted(a["label"] for a in answers) == ["meh", "neg", "pos"]
    from fastapi.testclient import TestClient

    from avey_b.apps.serve import build_app
    from avey_b.apps.serve.options import ServeOptions
    from avey_b.inference.encoder import Encoder
    from avey_b.inference.options import LoadOptions

    with TestClient(build_app(Encoder(str(out), LoadOptions(precision="fp32")), ServeOptions(max_tokens=1000))) as c:
        result = c.post("/v1/classify", json={"input": ["the film was very good"]}).json()["results"][0]
    assert set(result["scores"]) == {"meh", "neg", "pos"} and result["label"] in result["scores"]


def test_results_hold_rounded_scores_beside_the_majority_class_baseline(three_class):
    record = json.loads((three_class["out"] / "results.json").read_text())
    assert record["labels"] == ["meh", "neg", "pos"] and record["problem_type"] == "single_label_classification"
    assert record["n_validation"] == 5 and record["n_train"] == 43  # 10% of 48 held out
    assert set(record["metrics"]) == set(record["baseline"]) == {"accuracy", "macro_f1"}
    assert record["baseline_name"] == "majority class"
    for value in [*record["metrics"].values(), *record["baseline"].values()]:
        assert value == round(value, 2)
    assert record["lr"] == 3e-3 and record["lr_source"] == "--lr"
    assert (three_class["out"] / "tokenizer.json").is_file() and (three_class["out"] / "SHA256SUMS").is_file()
    assert not (three_class["out"] / "checkpoints").exists()


def test_a_finished_output_directory_is_refused_and_overwrite_moves_it_aside(three_class, models, capfd,
                                                                             transformers_log):
    out, train = three_class["out"], three_class["train"]
    argv = ["finetune", "--task", "text-classification", "--train-file", train, "--text-column", "review",
            "--label-column", "sentiment", *common_flags(models["avey"], out), "--max-train-examples", "8"]
    before = (out / "results.json").read_text()
    assert main(argv) == 1
    err = capfd.readouterr().err
    assert "already holds a run (a finished fine-tuning run: results.json)" in err and "--overwrite" in err
    assert (out / "results.json").read_text() == before
    # --resume on a finished run answers with its results and trains nothing
    options = OwnDataOptions(model=models["avey"], task="text-classification", train_file=train, output_dir=str(out),
                             text_column="review", label_column="sentiment", resume=True)
    assert finetune(options)["score"] == json.loads(before)["score"]
    capfd.readouterr()
    transformers_log.text()
    assert main([*argv, "--overwrite"]) == 0
    said = capfd.readouterr()  # the new head in one line of ours; no load report, no PAD/BOS/EOS notice, no bars
    assert "new head: classifier.* (initialized, trained by this run)" in said.out
    logged = transformers_log.text()
    assert "LOAD REPORT" not in logged and "PAD/BOS/EOS" not in logged
    assert "Writing model shards" not in said.out + said.err
    aside = [p for p in out.parent.iterdir() if p.name.startswith("out.old-")]
    assert len(aside) == 1 and (aside[0] / "results.json").read_text() == before
    assert json.loads((out / "results.json").read_text())["n_train"] == 8


def test_an_interrupted_run_resumes_from_its_checkpoint_with_the_same_options_only(models, tmp_path, monkeypatch):
    import avey_b.finetuning.common as common
    from avey_b.training.rundir import RunDirError

    out = tmp_path / "out"
    options = dict(model=models["avey"], task="text-classification", train_file=reviews_csv(tmp_path / "r.csv", 40),
                   text_column="review", label_column="sentiment", output_dir=str(out), lr=3e-3, batch_size=16,
                   epochs=1, device="cpu")
    finish = common.finish

    def crash(*args, **kwargs):
        raise KeyboardInterrupt  # killed after training, before the finished directory was written

    monkeypatch.setattr(common, "finish", crash)
    with pytest.raises(KeyboardInterrupt):
        finetune(OwnDataOptions(**options))
    assert not (out / "results.json").exists() and (out / "checkpoints" / "checkpoint-3").is_dir()
    with pytest.raises(RunDirError, match="already holds a run"):
        finetune(OwnDataOptions(**options))
    with pytest.raises(RunDirError, match=r"lr: 0.003 \(checkpoint\) -> 0.001 \(requested\)"):
        finetune(OwnDataOptions(**options | {"lr": 1e-3}, resume=True))
    monkeypatch.setattr(common, "finish", finish)
    record = finetune(OwnDataOptions(**options, resume=True))
    assert record["resumed_from"].endswith("checkpoint-3") and record["steps"] == 3
    assert (out / "results.json").is_file() and not (out / "checkpoints").exists()


def test_resume_takes_the_newest_checkpoint_written_to_its_end(tmp_path):
    """A kill while transformers writes a checkpoint leaves ``checkpoint-N`` without ``trainer_state.json`` (written
    last) or with it cut short; --resume takes the newest complete one, never the partial one (transformers'
    get_last_checkpoint took the highest number)."""
    from avey_b.finetuning.common import last_complete_checkpoint

    for step, state in ((3, '{"global_step": 3}'), (6, '{"global_st'), (9, None)):
        (tmp_path / f"checkpoint-{step}").mkdir()
        (tmp_path / f"checkpoint-{step}" / "model.safetensors").write_bytes(b"...")
        if state is not None:
            (tmp_path / f"checkpoint-{step}" / "trainer_state.json").write_text(state)
    assert last_complete_checkpoint(tmp_path) == str(tmp_path / "checkpoint-3")
    assert last_complete_checkpoint(tmp_path / "none") is None


def test_multi_label_from_jsonl_lists(models, tmp_path):
    rng = random.Random(1)
    path = tmp_path / "tags.jsonl"
    with open(path, "w") as f:
        for _ in range(40):
            labels = sorted(rng.sample(["plot", "cast", "music"], rng.randint(0, 2)))
            text = " and ".join(f"the {w} was good" for w in labels) or "the film was fine"
            f.write(json.dumps({"text": text, "topics": labels}) + "\n")
    out = tmp_path / "out"
    record = finetune(OwnDataOptions(model=models["bert"], task="text-classification", train_file=str(path),
                                     label_column="topics", output_dir=str(out), lr=3e-3, batch_size=16, epochs=1,
                                     device="cpu", max_length=8))
    assert record["problem_type"] == "multi_label_classification" and record["labels"] == ["cast", "music", "plot"]
    assert record["max_length"] == 8 and record["inputs_cut"]["train"] > 0  # --max-length cuts, and says how many
    assert set(record["metrics"]) == {"micro_f1", "macro_f1", "exact_match"} == set(record["baseline"])
    config = AutoConfig.from_pretrained(out)
    assert config.problem_type == "multi_label_classification" and config.id2label[2] == "plot"


def test_regression_scores_beside_the_training_mean(models, tmp_path):
    rng = random.Random(2)
    path = tmp_path / "scores.tsv"
    with open(path, "w") as f:
        f.write("text\tscore\n")
        for _ in range(40):
            adj = rng.choice(ADJ["pos"] + ADJ["neg"])
            f.write(f"the film was {adj}\t{(4.5 if adj in ADJ['pos'] else 0.5) + rng.random() / 10:.2f}\n")
    record = finetune(OwnDataOptions(model=models["avey"], task="text-classification", train_file=str(path),
                                     label_column="score", output_dir=str(tmp_path / "out"), lr=3e-3, batch_size=16,
                                     epochs=1, device="cpu"))
    assert record["problem_type"] == "regression" and record["labels"] == []
    assert set(record["metrics"]) == {"mse", "pearson", "spearman"}
    assert record["baseline_name"] == "training mean" and record["baseline"]["pearson"] is None
    assert AutoConfig.from_pretrained(tmp_path / "out").num_labels == 1


def tagged_sentences(n, seed):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        person, place = rng.choice(toy._PEOPLE).split(), rng.choice(toy._PLACES).split()
        words = person + ["met", "Bob", "in"] + place + ["today"]
        tags = (["B-PER"] + ["I-PER"] * (len(person) - 1) + ["O", "B-PER", "O", "B-LOC"]
                + ["I-LOC"] * (len(place) - 1) + ["O"])
        out.append((words, tags))
    return out


@pytest.mark.parametrize("form", ["jsonl", "conll"])
def test_a_tagger_names_its_tags_from_jsonl_and_from_conll_columns(models, tmp_path, form):
    train, dev = tagged_sentences(24, 0), tagged_sentences(6, 1)
    paths = []
    for name, sentences in (("train", train), ("dev", dev)):
        if form == "jsonl":
            path = tmp_path / f"{name}.jsonl"
            path.write_text("".join(json.dumps({"words": w, "ner": t}) + "\n" for w, t in sentences))
        else:  # word, part of speech, tag: the tag is the last column
            path = tmp_path / f"{name}.conll"
            path.write_text("-DOCSTART- X O\n\n" + "\n\n".join(
                "\n".join(f"{w} NN {t}" for w, t in zip(words, tags, strict=True)) for words, tags in sentences) + "\n")
        paths.append(str(path))
    out = tmp_path / "out"
    columns = ["--tokens-column", "words", "--tags-column", "ner"] if form == "jsonl" else []
    assert main(["finetune", "--task", "token-classification", "--train-file", paths[0], "--validation-file",
                 paths[1], *columns, *common_flags(models["avey"], out)]) == 0
    record = json.loads((out / "results.json").read_text())
    assert record["tags"] == ["O", "B-LOC", "B-PER", "I-LOC", "I-PER"] and record["metric"] == "f1"
    assert record["baseline"]["f1"] == 0.0 and record["baseline_name"] == "all O" and record["n_validation"] == 6
    found = pipeline("token-classification", model=str(out), ignore_labels=[])("Alice Smith met Bob in Paris")
    assert found and {t["entity"] for t in found} <= set(record["tags"])


def test_a_tagger_records_the_pipeline_call_that_answers_in_whole_words(models, tmp_path, capsys):
    """transformers' pipeline cannot take a default aggregation from a saved directory, so the run prints and
    records the call that gives words, not sub-word pieces (the toy tokenizer splits "Smithson" into letters)."""
    from avey_b.finetuning.tagging import AGGREGATION

    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps({"tokens": w, "tags": t}) + "\n" for w, t in tagged_sentences(30, 0)))
    out = tmp_path / "out"
    assert main(["finetune", "--task", "token-classification", "--train-file", str(path),
                 *common_flags(models["avey"], out)]) == 0
    record = json.loads((out / "results.json").read_text())
    call = f'pipeline("token-classification", model="{out}", aggregation_strategy="{AGGREGATION}")'
    assert record["pipeline"] == call and f"tags per word: {call}" in capsys.readouterr().out
    text = "Alice Smithson met Bob in Paris"
    words = {(m.start(), m.end()) for m in re.finditer(r"\S+", text)}
    starts, ends = {s for s, _ in words}, {e for _, e in words}
    pieces = pipeline("token-classification", model=str(out), ignore_labels=[])(text)
    assert any(p["start"] not in starts or p["end"] not in ends for p in pieces)  # the default: sub-word pieces
    grouped = pipeline("token-classification", model=str(out), ignore_labels=[], aggregation_strategy=AGGREGATION)(
        text)
    assert grouped and all(g["start"] in starts and g["end"] in ends for g in grouped), grouped
    assert {g["entity_group"] for g in grouped} <= {t.split("-")[-1] for t in record["tags"]}


def test_a_bad_line_is_named_with_its_file(models, tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("text,label\nthe film was good,pos\nthe plot was bad,neg\n  ,pos\nthe cast was fine,neg\n")
    options = dict(model=models["avey"], task="text-classification", output_dir=str(tmp_path / "out"), device="cpu")
    with pytest.raises(DataFileError, match=r"bad\.csv, line 4: empty text in column 'text'"):
        finetune(OwnDataOptions(train_file=str(path), **options))
    with pytest.raises(DataFileError, match=r"bad\.csv, line 2: no text column 'review'.*'label', 'text'"):
        finetune(OwnDataOptions(train_file=str(path), text_column="review", **options))
    dev = tmp_path / "dev.jsonl"
    dev.write_text('{"review": "a good film", "sentiment": "pos"}\n{"review": "a film", "sentiment": "nuetral"}\n')
    train = reviews_csv(tmp_path / "ok.csv", 12, 0, ("pos", "neg"))
    with pytest.raises(DataFileError, match=r"dev\.jsonl, line 2: label 'nuetral' never occurs in the training rows"):
        finetune(OwnDataOptions(train_file=train, validation_file=str(dev), text_column="review",
                                label_column="sentiment", **options))
    assert not (tmp_path / "out").exists()  # nothing written before the inputs are checked


def test_an_input_longer_than_memory_allows_is_named_not_cut(models, tmp_path, monkeypatch):
    import avey_b.utils.batching as batching

    monkeypatch.setattr(batching, "default_max_tokens", lambda hidden_size: 12)  # "memory" for 12 tokens
    path = tmp_path / "long.csv"
    path.write_text("text,label\nthe film was good,pos\nthe film was bad and the plot was very very awful,neg\n")
    with pytest.raises(DataFileError, match=r"long\.csv, line 3: input of 1[0-9] tokens, longer than the 12 tokens"):
        finetune(OwnDataOptions(model=models["avey"], task="text-classification", train_file=str(path),
                                validation_file=str(path), output_dir=str(tmp_path / "out"), device="cpu"))


def test_help_shows_one_example_per_task_and_both_families(capsys):
    with pytest.raises(SystemExit):
        main(["finetune", "--help"])
    text = capsys.readouterr().out
    for task in ("text-classification", "token-classification", "embedding", "rerank", "multi-vector", "sst2"):
        assert f"avey-b finetune --task {task} " in text
    assert "--label-column" in text and "--text-pair-column" in text and "--protocol" in text


def test_default_learning_rate_is_recorded_with_its_source():
    lr, source = OwnDataOptions(model="m", task="token-classification", train_file="t", output_dir="o").learning_rate()
    assert lr == 5e-5 and "Devlin" in source
    with pytest.raises(ValueError, match="CUDA_VISIBLE_DEVICES=1 and --device cuda"):  # not silently GPU 0
        OwnDataOptions(model="m", task="text-classification", train_file="t", output_dir="o", device="cuda:1")
    with pytest.raises(ValueError, match="not both"):
        OwnDataOptions(model="m", task="text-classification", train_file="t", output_dir="o", overwrite=True,
                       resume=True)


def test_parquet_and_a_local_hf_dataset_read_the_named_columns(tmp_path):
    import datasets

    from avey_b.finetuning.data import read_table

    rows = {"body": ["a good film", "a bad film", ""], "stars": ["5", "1", "3"]}
    datasets.Dataset.from_dict(rows).to_parquet(str(tmp_path / "r.parquet"))
    datasets.DatasetDict({"test": datasets.Dataset.from_dict(rows)}).save_to_disk(str(tmp_path / "ds"))
    for source in (str(tmp_path / "r.parquet"), f"hf:{tmp_path / 'ds'}@test"):
        table = read_table(source, {"text": "body", "label": "stars"}, task="text-classification")
        assert table.rows[1] == {"body": "a bad film", "stars": "1"} and table.where(2) == f"{source}, row 3"
    with pytest.raises(DataFileError, match=r"ds: no split 'train' \(the dataset has \['test'\]"):
        read_table(f"hf:{tmp_path / 'ds'}", {"text": "body"}, task="text-classification")
    from avey_b.finetuning.classification import texts_of

    with pytest.raises(DataFileError, match=r"r\.parquet, row 3: empty text in column 'body'"):
        texts_of(read_table(str(tmp_path / "r.parquet"), {"text": "body"}, task="text-classification"), "body")


def test_a_validation_only_tag_joins_the_tag_set_after_the_training_tags():
    from avey_b.finetuning.data import Table
    from avey_b.finetuning.tagging import tag_set

    train = Table("t", [{"tokens": ["EU", "rejects"], "tags": ["I-ORG", "O"]}], ["line 1"])
    dev = Table("d", [{"tokens": ["Peter", "EU"], "tags": ["B-ORG", "I-ORG"]}], ["line 1"])
    assert tag_set(train, dev) == (["O", "I-ORG", "B-ORG"], ["B-ORG"])


def test_a_load_report_that_is_only_the_new_head_is_said_in_one_line_and_any_other_is_shown(models, capfd,
                                                                                             transformers_log):
    from types import SimpleNamespace

    from transformers import AutoModelForSequenceClassification

    from avey_b.finetuning.loading import NewHeadReport, load_with_new_head, new_head_line

    avey = SimpleNamespace(base_model_prefix="model")
    assert new_head_line(avey, {"missing_keys": {"classifier.weight", "classifier.bias"}}) == \
        "new head: classifier.* (initialized, trained by this run)"
    assert new_head_line(avey, {"missing_keys": {"head.dense.weight", "classifier.bias"},
                                "unexpected_keys": {"decoder.bias"}}) == \
        ("new head: classifier.*, head.* (initialized, trained by this run); the checkpoint's decoder.* (its "
         "pretraining head) is not used")
    for info in ({"missing_keys": {"classifier.bias", "model.layers.0.weight"}},  # an encoder weight is new too
                 {"missing_keys": {"classifier.bias"}, "mismatched_keys": {("classifier.bias", (3,), (2,))}},
                 {"missing_keys": set(), "unexpected_keys": {"decoder.bias"}}):
        assert new_head_line(avey, info) is None

    model = load_with_new_head(AutoModelForSequenceClassification, models["avey"], num_labels=3)
    assert model.config.num_labels == 3
    assert "new head: classifier.* (initialized, trained by this run)" in capfd.readouterr().out
    assert "LOAD REPORT" not in transformers_log.text()
    load_with_new_head(AutoModelForSequenceClassification, models["bert"], num_labels=3)
    logged = transformers_log.text()  # BERT's pooler is an encoder weight its masked-LM checkpoint lacks: the table
    assert "LOAD REPORT" in logged and "bert.pooler" in logged and "new head" not in capfd.readouterr().out
    with NewHeadReport() as report:  # read from the report's rows when no loading info is given
        bert = AutoModelForSequenceClassification.from_pretrained(models["bert"], num_labels=3)
        rows = report.rows()
        report.settle(bert)
    assert rows["missing_keys"] == {"classifier.weight", "classifier.bias", "bert.pooler.dense.weight",
                                    "bert.pooler.dense.bias"} and "cls.predictions.bias" in rows["unexpected_keys"]
    assert "LOAD REPORT" in transformers_log.text()


def test_special_ids_the_config_lacks_come_from_the_tokenizer_and_set_ones_stay():
    from types import SimpleNamespace

    from transformers import BertConfig

    from avey_b.finetuning.loading import fill_special_ids

    config = BertConfig(pad_token_id=0)
    config.eos_token_id = None
    model = SimpleNamespace(config=config)
    tokenizer = SimpleNamespace(pad_token_id=7, bos_token_id=2, eos_token_id=5)
    assert fill_special_ids(model, tokenizer) == {"bos_token_id": 2, "eos_token_id": 5}
    assert (config.pad_token_id, config.bos_token_id, config.eos_token_id) == (0, 2, 5)
    assert fill_special_ids(SimpleNamespace(config=None), tokenizer) == {}
