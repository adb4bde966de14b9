"""Bad data files stop early with a message naming the file and the line (or byte offset), for training and
evaluation alike, and a file of the wrong format says what was found instead of training on it."""

import json

import pytest

from avey_b.data.corpus import SourceSpec, iter_documents
from avey_b.evaluation.tasks import get_task
from avey_b.evaluation.tasks.base import DataFiles
from avey_b.training.config import load_config
from avey_b.utils.files import DataFileError


def docs(path):
    return [text for _, text in iter_documents(SourceSpec(str(path)))]


def test_malformed_jsonl_line_names_file_and_line(tmp_path):
    f = tmp_path / "corpus.jsonl"
    f.write_text('{"text": "one"}\n\n{"text": "two"}\n{"text": "three",}\n')
    with pytest.raises(DataFileError, match=r"corpus\.jsonl, line 4, column 18: not valid JSON"):
        docs(f)


@pytest.mark.parametrize("name, content", [
    ("corpus.jsonl", b'{"text": "ok"}\n{"text": "caf\xe9"}\n'),
    ("corpus.txt", b"first paragraph\n\nsecond caf\xe9 paragraph\n"),
])
def test_non_utf8_training_text_names_file_line_and_byte(tmp_path, name, content):
    (tmp_path / name).write_bytes(content)
    offset = content.index(b"\xe9")
    with pytest.raises(DataFileError, match=rf"{name}, line \d+ \(byte offset {offset}\): not UTF-8"):
        docs(tmp_path / name)


def test_non_utf8_conll_names_the_byte(tmp_path):
    f = tmp_path / "train.conll"
    f.write_bytes(b"EU B-ORG\nrejects O\n\nM\xfcller B-PER\n")
    with pytest.raises(DataFileError, match=r"train\.conll, line 4 \(byte offset 21\): not UTF-8"):
        get_task("conll2003").load("train", DataFiles(train=str(f)))


def test_a_tsv_given_as_conll_says_what_it_found(tmp_path):
    f = tmp_path / "sst2.tsv"
    f.write_text("sentence\tlabel\nit 's a charming and often affecting journey . \t1\n")
    with pytest.raises(DataFileError, match=r"sst2\.tsv, line 1 does not look like CoNLL NER data: its last column "
                                            r"'label' is not an entity tag"):
        get_task("conll2003").load("train", DataFiles(train=str(f)))


def test_a_conll_file_given_as_sst2_says_what_it_found(tmp_path):
    f = tmp_path / "eng.train"
    f.write_text("-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\n")
    with pytest.raises(DataFileError, match=r"does not look like SST-2 data: found columns \['-DOCSTART- -X- -X- O'\]"):
        get_task("sst2").load("train", DataFiles(train=str(f)))


def test_tsv_row_missing_its_tab_names_the_line(tmp_path):
    f = tmp_path / "train.tsv"
    f.write_text("sentence\tlabel\ngood film\t1\nbad film 0\nfine\t1\n")
    with pytest.raises(DataFileError, match=r"train\.tsv, line 3: 1 tab-separated field\(s\) where the header "
                                            r"\['sentence', 'label'\] has 2"):
        get_task("sst2").load("train", DataFiles(train=str(f)))


def test_bad_label_names_the_line(tmp_path):
    f = tmp_path / "train.tsv"
    f.write_text("sentence\tlabel\ngood film\t1\nbad film\tnegative\n")
    with pytest.raises(DataFileError, match=r"train\.tsv, line 3: label 'negative' is not a class id of sst2"):
        get_task("sst2").load("train", DataFiles(train=str(f)))


def test_squad_and_beir_format_errors(tmp_path):
    (tmp_path / "q.json").write_text(json.dumps({"version": "v2.0", "articles": []}))
    with pytest.raises(DataFileError, match=r"does not look like a SQuAD JSON file: expected a top-level 'data' list, "
                                            r"found \['articles', 'version'\]"):
        get_task("squad").load("train", DataFiles(train=str(tmp_path / "q.json")))
    (tmp_path / "bad.json").write_text('{"data": [\n  {"title": "x",}\n]}')
    with pytest.raises(DataFileError, match=r"bad\.json, line 2, column \d+: not valid JSON"):
        get_task("squad").load("train", DataFiles(train=str(tmp_path / "bad.json")))
    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    (beir / "corpus.jsonl").write_text('{"_id": "d1", "text": "a"}\n{"id": "d2", "text": "b"}\n')
    (beir / "queries.jsonl").write_text('{"_id": "q1", "text": "a?"}\n')
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    with pytest.raises(DataFileError, match=r"corpus\.jsonl, line 2: no '_id' field"):
        get_task("nq").load("eval", DataFiles(eval=str(beir), eval_split="test"))


@pytest.mark.parametrize("override, message", [
    ("train.micro_batch_size=-3", "train.micro_batch_size must be a positive integer, got -3"),
    ("train.max_steps=0", "train.max_steps must be a positive integer, got 0"),
    ("checkpoint.keep_last=-1", "checkpoint.keep_last must be an integer >= 0"),
    ("data.mask_rate=1.5", r"data.mask_rate must be in \(0, 1\)"),
])
def test_bad_numbers_in_the_pretraining_config_say_what_is_wrong(override, message):
    with pytest.raises(ValueError, match=message):
        load_config(None, ["train.max_steps=10", override])
