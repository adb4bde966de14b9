"""Tiny, fully offline material for the harness: a WordPiece tokenizer trained on the spot, tiny encoders
built from configs (BERT and Avey-B), and tiny data files in every
local format the tasks read. The tests use it, and so does the CPU demo suite (the shipped ``tiny`` suite):

    python -m avey_b.testing --out /tmp/avey-toy      # then: avey-b evaluate --config tiny

The data are synthetic and learnable (the sentiment of a sentence is the polarity of its adjective,
entities are capitalised names from fixed lists), so a few steps already move the scores; they measure
nothing about real language.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import string
import sys

import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from transformers import BertConfig, BertForMaskedLM, PreTrainedTokenizerFast

from avey_b.model import presets
from avey_b.model.auto import (  # (and registers Avey-B)
    AveyBForMaskedLM,
    AveyBForMultiVector,
    AveyBForSequenceClassification,
)

_POS = ["good", "great", "lovely", "superb", "fine"]
_NEG = ["bad", "awful", "poor", "dreadful", "weak"]
_NOUNS = ["film", "plot", "cast", "story", "music", "ending"]
_PEOPLE = ["Alice Smith", "Bob", "Carol Jones", "Dave"]
_PLACES = ["Paris", "New York", "Berlin"]
_FILLER = ["the", "a", "was", "very", "and", "in", "with", "met", "from", "today", "said", "bob"]


def tokenizer(directory: str):
    """A lower-casing WordPiece tokenizer with BERT-style specials and pair template over the toy vocabulary
    (whole toy words, single letters and ``##`` letter pieces, so unseen words split into sub-tokens);
    saved as a ``transformers`` fast tokenizer in ``directory`` and returned. The vocabulary is written
    out rather than trained so that tests see the same splits on every run."""
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    words = sorted({w.lower() for w in " ".join(_POS + _NEG + _NOUNS + _FILLER + _PEOPLE + _PLACES).split()})
    pieces = list(string.ascii_lowercase) + ["##" + c for c in string.ascii_lowercase] + list("0123456789?.,!-")
    vocab = {t: i for i, t in enumerate(dict.fromkeys(specials + words + pieces + ["where", "who", "what"]))}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    cls, sep = vocab["[CLS]"], vocab["[SEP]"]
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    tok.decoder = decoders.WordPiece()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]")
    fast.save_pretrained(directory)
    return fast


def bert(directory: str, tok, hidden: int = 32, layers: int = 2, seed: int = 0) -> str:
    """A randomly initialised tiny BERT (masked-LM) with the toy tokenizer, saved to ``directory``; the same
    weights for the same ``seed`` in every process (the global RNG is left as it was)."""
    cfg = BertConfig(vocab_size=len(tok), hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=2,
                     intermediate_size=4 * hidden, max_position_embeddings=512, pad_token_id=tok.pad_token_id)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = BertForMaskedLM(cfg)
    model.save_pretrained(directory)
    tok.save_pretrained(directory)
    return directory


def avey_b(directory: str, tok, seed: int = 0, **overrides) -> str:
    """A randomly initialised tiny Avey-B (``presets.tiny()``, vocabulary resized to the tokenizer); the same
    weights for the same ``seed`` in every process (the global RNG is left as it was)."""
    cfg = presets.tiny(vocab_size=len(tok), pad_token_id=tok.pad_token_id, **overrides)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AveyBForMaskedLM(cfg)
    model.save_pretrained(directory)
    tok.save_pretrained(directory)
    return directory


def served_model(directory: str, kind: str) -> str:
    """A tiny model for a server under test, with its tokenizer, saved in ``directory``: ``"cross-encoder"`` (a
    one-label sequence classifier: embeds, classifies, reranks), ``"masked-lm"`` (embeds, fills masks, gives sparse
    vectors) or ``"multi-vector"`` (embeds, gives token vectors and MaxSim scores)."""
    tok = tokenizer(directory)
    if kind == "cross-encoder":
        model = seeded(AveyBForSequenceClassification, presets.tiny(vocab_size=len(tok), num_labels=1))
    elif kind == "multi-vector":
        model = seeded(AveyBForMultiVector, presets.tiny(vocab_size=len(tok), multivector_dim=16))
    else:
        model = seeded(AveyBForMaskedLM, presets.tiny(vocab_size=len(tok)))
    model.save_pretrained(directory)
    return directory


def seeded(cls, config, seed: int = 0):
    """A ``cls(config)`` built after ``torch.manual_seed(seed)`` (the global RNG stays seeded), in eval mode: the
    same weights, and deterministic outputs, in every test that asks for the same seed."""
    torch.manual_seed(seed)
    return cls(config).eval()


def sst2_tsv(path: str, n: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as f:
        f.write("sentence\tlabel\n")
        for _ in range(n):
            label = rng.randint(0, 1)
            adj = rng.choice(_POS if label else _NEG)
            f.write(f"the {rng.choice(_NOUNS)} was very {adj} \t{label}\n")
    return path


def conll(path: str, n: int, seed: int = 0) -> str:
    """CoNLL-2003-style 4-column file (IOB1 tags, as in the original release)."""
    rng = random.Random(seed)
    lines = ["-DOCSTART- -X- O O", ""]
    for _ in range(n):
        person, place = rng.choice(_PEOPLE).split(), rng.choice(_PLACES).split()
        words = person + ["met", "Bob", "in"] + place + ["today"]
        tags = ["I-PER"] * len(person) + ["O", "I-PER", "O"] + ["I-LOC"] * len(place) + ["O"]
        lines += [f"{w} X X {t}" for w, t in zip(words, tags, strict=False)] + [""]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return path


def squad_json(path: str, n: int, seed: int = 0, with_impossible: bool = False) -> str:
    rng = random.Random(seed)
    paragraphs = []
    for i in range(n):
        person, place = rng.choice(_PEOPLE), rng.choice(_PLACES)
        context = f"the film was good and {person} was in {place} today with the cast ."
        qas = [{"id": f"q{i}", "question": f"where was {person} ?",
                "answers": [{"text": place, "answer_start": context.index(place)}]}]
        if with_impossible:
            qas.append({"id": f"q{i}-x", "question": "who was awful ?", "answers": [], "is_impossible": True})
        paragraphs.append({"context": context, "qas": qas})
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"version": "toy", "data": [{"title": "toy", "paragraphs": paragraphs}]}, f)
    return path


def beir(directory: str, n_queries: int, n_docs: int, seed: int = 0) -> str:
    """A BEIR directory whose relevant document repeats the query's two keywords; qrels for train and test."""
    rng = random.Random(seed)
    os.makedirs(os.path.join(directory, "qrels"), exist_ok=True)
    words = _POS + _NEG + _NOUNS
    docs = {f"d{j}": " ".join(rng.sample(words, 4)) for j in range(n_docs)}
    queries, qrels = {}, []
    for i in range(n_queries):
        target = f"d{rng.randrange(n_docs)}"
        queries[f"q{i}"] = " ".join(docs[target].split()[:2])
        qrels.append((f"q{i}", target, 1))
    with open(os.path.join(directory, "corpus.jsonl"), "w", encoding="utf-8") as f:
        for did, text in docs.items():
            f.write(json.dumps({"_id": did, "title": "", "text": text}) + "\n")
    with open(os.path.join(directory, "queries.jsonl"), "w", encoding="utf-8") as f:
        for qid, text in queries.items():
            f.write(json.dumps({"_id": qid, "text": text}) + "\n")
    half = len(qrels) // 2
    for split, rows in (("train", qrels[:half]), ("test", qrels[half:])):
        with open(os.path.join(directory, "qrels", f"{split}.tsv"), "w", encoding="utf-8") as f:
            f.write("query-id\tcorpus-id\tscore\n")
            f.writelines(f"{q}\t{d}\t{s}\n" for q, d, s in rows)
    return directory


def encoders(root) -> dict[str, str]:
    """The tiny tokenizer and the two tiny encoders sharing it under ``root`` (``tok``, ``bert``, ``avey``): what the
    evaluation tests fine-tune."""
    tok = tokenizer(os.path.join(root, "tok"))
    return {"tok": tok, "bert": bert(os.path.join(root, "bert"), tok), "avey": avey_b(os.path.join(root, "avey"), tok)}


def build_all(out: str) -> dict[str, str]:
    """Everything the tiny demo suite needs, under ``out``; returns the paths."""
    os.makedirs(out, exist_ok=True)
    tok = tokenizer(os.path.join(out, "tokenizer"))
    paths = {"bert": bert(os.path.join(out, "bert-tiny"), tok), "avey-b": avey_b(os.path.join(out, "avey-b-tiny"), tok)}
    paths["sst2_train"] = sst2_tsv(os.path.join(out, "sst2_train.tsv"), 256, seed=0)
    paths["sst2_dev"] = sst2_tsv(os.path.join(out, "sst2_dev.tsv"), 64, seed=1)
    paths["conll_train"] = conll(os.path.join(out, "conll.train"), 128, seed=0)
    paths["conll_dev"] = conll(os.path.join(out, "conll.dev"), 32, seed=1)
    paths["squad_train"] = squad_json(os.path.join(out, "squad_train.json"), 128, seed=0)
    paths["squad_dev"] = squad_json(os.path.join(out, "squad_dev.json"), 32, seed=1)
    paths["beir"] = beir(os.path.join(out, "beir"), 64, 40)
    return paths


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m avey_b.testing", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="directory to create")
    args = p.parse_args(argv)
    print(json.dumps(build_all(args.out), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
