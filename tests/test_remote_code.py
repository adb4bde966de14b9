"""A saved Avey-B loads in a process where the package cannot be imported (transformers' custom code: the model's
modules saved beside the weights, ``auto_map`` + ``trust_remote_code=True``), and where the package is imported its
own classes are used and the saved code does not run."""

import json
import os
import subprocess
import sys

import pytest
import torch
from transformers import AutoModelForMaskedLM, AutoTokenizer

from avey_b import AveyBForMaskedLM, AveyBForSentenceEmbedding
from avey_b import testing as toy
from avey_b.model import presets
from avey_b.model.remote_code import MODULES, PREFIX
from avey_b.testing import seeded

# Run in a fresh interpreter: `import avey_b` fails there, so only the saved code can build the model.
WITHOUT_THE_PACKAGE = r"""
import json, sys
sys.modules["avey_b"] = None
try:
    import avey_b  # noqa: F401
    raise SystemExit("avey_b was importable")
except ImportError:
    pass
import torch
import transformers

directory, kind, out = sys.argv[1:4]
ids = torch.tensor(json.loads(sys.argv[4]))
mask = torch.ones_like(ids)
mask[1, -3:] = 0
with torch.no_grad():
    if kind == "SentenceTransformer":
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(directory, trust_remote_code=True, device="cpu")
        result = torch.as_tensor(model.encode(json.loads(sys.argv[5])))
        module = type(model[0].model).__module__
    else:
        model = getattr(transformers, kind).from_pretrained(directory, trust_remote_code=True).eval()
        result = model(input_ids=ids, attention_mask=mask)[0]
        module = type(model).__module__
torch.save(result, out)
print(module)
"""


def load_without_the_package(tmp_path, directory, kind, ids, texts=()):
    out = tmp_path / "out.pt"
    env = {**os.environ, "HF_MODULES_CACHE": str(tmp_path / "modules"), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-c", WITHOUT_THE_PACKAGE, str(directory), kind, str(out),
                           json.dumps(ids.tolist()), json.dumps(list(texts))],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1].startswith("transformers_modules.")  # the saved code ran
    return torch.load(out)


@pytest.fixture
def ids():
    return torch.randint(1, 99, (2, 21), generator=torch.Generator().manual_seed(0))


@pytest.mark.slow
def test_a_saved_masked_lm_loads_without_the_package_and_gives_the_same_outputs(tmp_path, ids):
    model = seeded(AveyBForMaskedLM, presets.tiny(ranker="bidirectional"))
    model.save_pretrained(tmp_path / "mlm")
    assert {f"{PREFIX}{m}.py" for m in MODULES} <= set(os.listdir(tmp_path / "mlm"))
    auto_map = json.loads((tmp_path / "mlm" / "config.json").read_text())["auto_map"]
    assert auto_map["AutoModelForMaskedLM"] == "avey_b_heads.AveyBForMaskedLM"
    mask = torch.ones_like(ids)
    mask[1, -3:] = 0
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask).logits
    got = load_without_the_package(tmp_path, tmp_path / "mlm", "AutoModelForMaskedLM", ids)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)


def test_where_the_package_is_imported_its_classes_are_used_not_the_saved_code(tmp_path):
    seeded(AveyBForMaskedLM, presets.tiny()).save_pretrained(tmp_path)
    loaded = AutoModelForMaskedLM.from_pretrained(tmp_path, trust_remote_code=True)
    assert type(loaded) is AveyBForMaskedLM


@pytest.mark.slow
def test_a_finetuned_classifier_and_an_embedding_model_load_without_the_package(tmp_path, ids):
    from avey_b.cli import main

    tok = toy.tokenizer(str(tmp_path / "tok"))
    base = toy.avey_b(str(tmp_path / "base"), tok)
    train, dev = toy.sst2_tsv(str(tmp_path / "t.tsv"), 64, 0), toy.sst2_tsv(str(tmp_path / "d.tsv"), 16, 1)
    assert main(["finetune", "--model", base, "--task", "sst2", "--lr", "3e-3", "--output-dir", str(tmp_path / "o"),
                 "--train-file", train, "--eval-file", dev, "--batch-size", "16", "--max-length", "16",
                 "--device", "cpu", "--max-steps", "2", "--save-model", str(tmp_path / "clf")]) == 0
    from transformers import AutoModelForSequenceClassification

    clf = AutoModelForSequenceClassification.from_pretrained(tmp_path / "clf").eval()
    ids = ids % len(tok)
    mask = torch.ones_like(ids)
    mask[1, -3:] = 0
    with torch.no_grad():
        expected = clf(input_ids=ids, attention_mask=mask).logits
    got = load_without_the_package(tmp_path, tmp_path / "clf", "AutoModelForSequenceClassification", ids)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)

    pytest.importorskip("sentence_transformers")
    emb = seeded(AveyBForSentenceEmbedding, presets.tiny(vocab_size=len(tok)))
    emb.save_pretrained(tmp_path / "emb")
    tok.save_pretrained(tmp_path / "emb")
    texts = ["a good film", "the plot was awful and the cast was weak"]
    enc = AutoTokenizer.from_pretrained(tmp_path / "emb")(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = emb(**enc).pooler_output
    got = load_without_the_package(tmp_path, tmp_path / "emb", "SentenceTransformer", ids, texts)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)  # the head's pooling and normalization


@pytest.mark.parametrize("normalize", [True, False])
def test_sentence_transformers_returns_exactly_the_heads_embeddings(tmp_path, normalize):
    from sentence_transformers import SentenceTransformer

    tok = toy.tokenizer(str(tmp_path))
    emb = seeded(AveyBForSentenceEmbedding, presets.tiny(vocab_size=len(tok), normalize_embeddings=normalize))
    emb.save_pretrained(tmp_path)
    texts = ["a good film", "bob met alice in paris " * 700]  # 3,500 words: nothing is cut
    enc = tok(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = emb(**enc).pooler_output
    st = SentenceTransformer(str(tmp_path), device="cpu")
    assert st.tokenize(texts[1:])["input_ids"].shape[1] == enc["input_ids"].shape[1]
    torch.testing.assert_close(torch.as_tensor(st.encode(texts)), expected, rtol=0, atol=1e-6)
    # without the normalization, the vectors are not unit vectors (the head and the directory agree on that too)
    assert torch.allclose(expected.norm(dim=-1), torch.ones(2)) == normalize


@pytest.mark.slow
def test_a_model_saved_again_without_the_package_keeps_every_head_loadable(tmp_path):
    seeded(AveyBForMaskedLM, presets.tiny()).save_pretrained(tmp_path / "mlm")
    script = r"""
import sys
sys.modules["avey_b"] = None
import transformers
src, dst = sys.argv[1:3]
transformers.AutoModel.from_pretrained(src, trust_remote_code=True).save_pretrained(dst)  # the backbone only
model = transformers.AutoModelForMaskedLM.from_pretrained(dst, trust_remote_code=True)  # a head of the copy
print(type(model).__name__)
"""
    env = {**os.environ, "HF_MODULES_CACHE": str(tmp_path / "modules"), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path / "mlm"), str(tmp_path / "copy")],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "AveyBForMaskedLM"


# A process where avey_b is installed (importable) but not imported: what loads a saved model's tokenizer and a
# sentence-transformers directory at once and silently (README, "Without this package"), each case timed. stdin is
# a terminal that never answers, so transformers' "Do you wish to run the custom code?" would wait its 15 s there.
# The import of avey_b comes last: from then on transformers knows the model type.
INSTALLED_NOT_IMPORTED = r"""
import json, sys, time
import transformers
from sentence_transformers import SentenceTransformer

directory, texts = sys.argv[1], json.loads(sys.argv[2])
cases = {
    "PreTrainedTokenizerFast":
        lambda: transformers.PreTrainedTokenizerFast.from_pretrained(directory)(texts)["input_ids"],
    "AutoTokenizer, trust_remote_code=True":
        lambda: transformers.AutoTokenizer.from_pretrained(directory, trust_remote_code=True)(texts)["input_ids"],
    "SentenceTransformer, trust_remote_code=True":
        lambda: SentenceTransformer(directory, trust_remote_code=True, device="cpu").encode(texts).tolist(),
    "import avey_b, then AutoTokenizer": lambda: __import__("avey_b") and transformers.AutoTokenizer.from_pretrained(
        directory)(texts)["input_ids"],
}
results = {}
for case, load in cases.items():
    assert "avey_b" not in sys.modules, "avey_b was imported"
    start = time.perf_counter()
    results[case] = {"result": load(), "seconds": time.perf_counter() - start}
    print(f"--- {case} done", flush=True)
print(json.dumps(results))
"""


@pytest.mark.slow
def test_where_the_package_is_installed_but_not_imported_the_documented_loaders_are_silent(tmp_path):
    pytest.importorskip("sentence_transformers")
    tok = toy.tokenizer(str(tmp_path / "emb"))
    emb = seeded(AveyBForSentenceEmbedding, presets.tiny(vocab_size=len(tok)))
    emb.save_pretrained(tmp_path / "emb")
    texts = ["a good film", "the plot was awful and the cast was weak"]
    with torch.no_grad():
        embeddings = emb(**tok(texts, padding=True, return_tensors="pt")).pooler_output
    env = {**os.environ, "HF_MODULES_CACHE": str(tmp_path / "modules"), "HF_HUB_OFFLINE": "1"}
    terminal, tty = os.openpty()
    try:
        proc = subprocess.run([sys.executable, "-c", INSTALLED_NOT_IMPORTED, str(tmp_path / "emb"), json.dumps(texts)],
                              stdin=tty, capture_output=True, text=True, env=env, timeout=240)
    finally:
        os.close(tty)
        os.close(terminal)
    assert proc.returncode == 0, proc.stderr[-3000:]
    output = proc.stdout + proc.stderr
    assert "custom code" not in output, output[-3000:]  # neither the question nor transformers' refusal
    assert "You are using a model of type" not in output, output[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert all(r["seconds"] < 15 for r in results.values()), results  # no question waited for its 15 s
    torch.testing.assert_close(torch.tensor(results.pop("SentenceTransformer, trust_remote_code=True")["result"]),
                               embeddings, rtol=0, atol=1e-6)
    assert {case: r["result"] for case, r in results.items()} == dict.fromkeys(results, tok(texts)["input_ids"])


# A process that never imports avey_b, stdin closed (a script or a job: a question cannot be answered there).
TOKENIZER_ONLY = r"""
import json, sys
sys.modules["avey_b"] = None  # `import avey_b` fails: transformers cannot have learned the model type from it
import transformers

directory, texts = sys.argv[1], json.loads(sys.argv[2])
auto = transformers.AutoTokenizer.from_pretrained(directory)(texts)["input_ids"]
print("--- PreTrainedTokenizerFast", flush=True)
plain = transformers.PreTrainedTokenizerFast.from_pretrained(directory)(texts)["input_ids"]
print(json.dumps([auto, plain]))
"""


def test_without_the_package_a_saved_tokenizer_loads_and_only_autotokenizer_asks_about_the_config_code(tmp_path):
    """Where avey_b is not imported, ``AutoTokenizer.from_pretrained(dir)`` reads ``config.json`` first, whose
    ``auto_map`` AutoConfig entry (what lets the model load there at all) makes transformers ask "Do you wish to run
    the custom code?"; that question is transformers' and the library keeps the entry (docs/checkpoints.md). With
    no answer (stdin closed) the tokenizer still loads, the same; ``PreTrainedTokenizerFast`` asks nothing."""
    tok = toy.tokenizer(str(tmp_path / "mlm"))
    seeded(AveyBForMaskedLM, presets.tiny(vocab_size=len(tok))).save_pretrained(tmp_path / "mlm")
    assert "auto_map" not in json.loads((tmp_path / "mlm" / "tokenizer_config.json").read_text())
    texts = ["a good film", "Alice Smithson met Bob"]
    env = {**os.environ, "HF_MODULES_CACHE": str(tmp_path / "modules"), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-c", TOKENIZER_ONLY, str(tmp_path / "mlm"), json.dumps(texts)],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    auto_part, plain_part = proc.stdout.split("--- PreTrainedTokenizerFast")
    assert "Do you wish to run the custom code?" in auto_part  # transformers' question, about config.json's code
    assert "custom code" not in plain_part and "custom code" not in proc.stderr
    assert json.loads(plain_part.strip().splitlines()[-1]) == [tok(texts)["input_ids"]] * 2


FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "saved-avey-b-0.1.0")


def _fixture_expected() -> tuple[torch.Tensor, dict]:
    expected = json.loads(open(os.path.join(FIXTURE, "expected.json")).read())
    return torch.tensor(expected["input_ids"]), expected


def test_a_checkpoint_saved_before_the_model_had_its_folder_loads_with_the_package_and_gives_its_outputs():
    """``tests/fixtures/saved-avey-b-0.1.0`` was saved by version 0.1.0, when the model's modules stood at the
    package's root (``avey_b.modeling``): its ``auto_map`` and saved code keep those names. With the package
    imported, its own classes load it, and the logits recorded then come out now."""
    ids, expected = _fixture_expected()
    model = AutoModelForMaskedLM.from_pretrained(FIXTURE, trust_remote_code=True).eval()
    assert type(model) is AveyBForMaskedLM
    # it states no input length: nothing (the paper protocol included) cuts it, and no generic code can either
    assert model.config.context_len is None and not hasattr(model.config, "max_position_embeddings")
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    torch.testing.assert_close(logits[0, 0], torch.tensor(expected["logits_first_token"]), rtol=0, atol=2e-5)
    assert abs(float(logits.sum()) - expected["logits_sum"]) < 1e-2


@pytest.mark.slow
def test_a_checkpoint_saved_before_the_model_had_its_folder_loads_without_the_package(tmp_path):
    """The same directory's saved code (its own module names) builds the model where the package is absent."""
    ids, expected = _fixture_expected()
    got = load_without_the_package(tmp_path, FIXTURE, "AutoModelForMaskedLM", ids.repeat(2, 1))
    torch.testing.assert_close(got[0, 0], torch.tensor(expected["logits_first_token"]), rtol=0, atol=2e-5)
