"""Files the library writes get the mode the umask gives (0644 under the usual 022): a service account or a colleague
can read the models, shards and records a run leaves. safetensors and ``tempfile.mkstemp`` (every atomic write) make
0600 files on their own."""

import os
import stat

import pytest
from transformers import BertConfig, BertForMaskedLM

from avey_b import AveyBForMaskedLM
from avey_b.model import presets
from avey_b.utils.records import (
    save_pretrained_atomic,
    write_bytes_atomic,
    write_json_atomic,
    write_text_atomic,
)


@pytest.fixture(params=[0o022, 0o077, 0o002])
def umask(request):
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_atomic_writes_honour_the_umask(tmp_path, umask):
    write_json_atomic(tmp_path / "a.json", {"x": 1})
    write_text_atomic(tmp_path / "b.md", "text")
    write_bytes_atomic(tmp_path / "c.bin", lambda f: f.write(b"\0"))
    for name in ("a.json", "b.md", "c.bin"):
        assert mode(tmp_path / name) == 0o666 & ~umask, name


def test_a_saved_avey_b_and_an_atomically_saved_model_directory_honour_the_umask(tmp_path, umask):
    AveyBForMaskedLM(presets.tiny()).save_pretrained(tmp_path / "avey")
    bert = BertForMaskedLM(BertConfig(vocab_size=40, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                      intermediate_size=8))
    save_pretrained_atomic(tmp_path / "bert", bert, None, texts={"README.md": "a BERT"})
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name == "model.safetensors" for p in files) and len(files) > 4
    assert {str(p.relative_to(tmp_path)): oct(mode(p)) for p in files if mode(p) != 0o666 & ~umask} == {}
