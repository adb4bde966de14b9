"""The quickstart's fill-mask examples, chosen by a fixed rule rather than by hand (and never by looking at a
model's predictions): held-out sentences of the bundled Python docs, each with one frequent word masked.

    python benchmarks/quickstart_recipes/select_fill.py --tokenizer runs/quickstart/model          # the YAML entries
    python benchmarks/quickstart_recipes/select_fill.py --score runs/quickstart/model runs/x/model  # hit rates

Rule: documents in the held-out 5% (by content hash), in corpus order, at most one sentence per document;
sentences of 40-110 characters that start with a capital and hold no code characters; the answer is the first
word of the sentence (after its first three words) among the 40 most frequent words of the *training* documents
that have at least 4 letters, are not stop words and are one token of the tokenizer; each answer word once;
the first 8 such sentences. Prints the YAML entries of ``eval.fill_examples``.

``--score`` measures what eight sentences cannot: the share of *all* sentences the rule admits (every eligible
sentence of every held-out document, answers allowed to repeat) whose answer is the model's first guess / in its
top 5, with the same forward as the pretraining job's fill-mask printout.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter

STOP = {"this", "that", "with", "from", "will", "there", "which", "when", "have", "then", "than", "them", "they",
        "their", "only", "also", "been", "were", "into", "does", "must", "should", "would", "could", "other", "such",
        "some", "used", "using", "each", "same", "more", "what", "where", "these", "those", "about", "after", "before",
        "while", "here", "your", "like", "most", "many", "much", "very", "just", "both", "either", "neither", "first",
        "true", "false", "none", "return", "returns", "note", "default", "given", "specified", "otherwise"}
CODE = set("()[]{}=<>*`'\"_:;/\\|#@$%^~")


def fill_sentences(tok, n: int | None = None, every_sentence: bool = False) -> list[dict]:
    """``{text, answer}`` by the rule above, in corpus order; ``every_sentence``: every eligible sentence of every
    held-out document, answers allowed to repeat."""
    from avey_b.data.corpus import is_heldout, python_docs_corpus

    docs = python_docs_corpus()
    counts = Counter(w for d in docs if not is_heldout(d, 0.05) for w in re.findall(r"\b[a-z]{4,}\b", d))
    frequent = [w for w, _ in counts.most_common(400) if w not in STOP and len(tok.tokenize(" " + w)) == 1][:40]
    chosen, used = [], set()
    for d in (d for d in docs if is_heldout(d, 0.05)):
        for s in re.split(r"(?<=[.])\s+", d):
            s = " ".join(s.split())
            if not (40 <= len(s) <= 110 and s[0].isupper() and not CODE & set(s)):
                continue
            words = s.split()
            hit = next((i for i, w in enumerate(words) if i >= 3 and w.rstrip(".,") in frequent
                        and (every_sentence or w.rstrip(".,") not in used)), None)
            if hit is None:
                continue
            answer = words[hit].rstrip(".,")
            words[hit] = words[hit].replace(answer, "[MASK]", 1)
            chosen.append({"text": " ".join(words), "answer": answer})
            used.add(answer)
            if not every_sentence:
                break
        if len(chosen) == n:
            break
    return chosen


def score(model_dir: str) -> dict:
    """Top-1 / top-5 hit rates of a saved masked-LM on every sentence the rule admits."""
    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    import avey_b  # noqa: F401  (registers the Auto classes)
    from avey_b.training.mlm_eval import fill_mask

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForMaskedLM.from_pretrained(model_dir)
    examples = fill_sentences(tok, every_sentence=True)
    with torch.no_grad():
        filled = fill_mask(model, tok, [e["text"] for e in examples], torch.device("cpu"))
    top = [preds[0].split("|") for _, preds in filled]
    n = len(examples)
    return {"model": model_dir, "sentences": n,
            "top1": sum(t[0] == e["answer"] for t, e in zip(top, examples, strict=True)) / n,
            "top5": sum(e["answer"] in t for t, e in zip(top, examples, strict=True)) / n}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokenizer", help="print the fill_examples entries for this tokenizer")
    p.add_argument("--n", type=int, default=8)
    p.add_argument("--score", nargs="+", metavar="MODEL_DIR",
                   help="hit rates of saved models on every admitted sentence")
    args = p.parse_args()
    if not (args.tokenizer or args.score):
        p.error("give --tokenizer or --score")
    for model_dir in args.score or []:
        print(json.dumps(score(model_dir)), flush=True)
    if args.tokenizer:
        from transformers import AutoTokenizer

        print("  fill_examples:")
        for c in fill_sentences(AutoTokenizer.from_pretrained(args.tokenizer), args.n):
            print(f"    - {{text: {json.dumps(c['text'])}, answer: {c['answer']}}}")


if __name__ == "__main__":
    main()
