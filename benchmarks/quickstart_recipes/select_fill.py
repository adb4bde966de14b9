"""The quickstart's fill-mask examples, chosen by a fixed rule rather than by hand (and never by looking at a
model's predictions): held-out sentences of the bundled Python docs, each with one frequent word masked.

    python benchmarks/quickstart_recipes/select_fill.py --tokenizer runs/quickstart/model

Rule: documents in the held-out 5% (by content hash), in corpus order, at most one sentence per document;
sentences of 40-110 characters that start with a capital and hold no code characters; the answer is the first
word of the sentence (after its first three words) among the 40 most frequent words of the *training* documents
that have at least 4 letters, are not stop words and are one token of the tokenizer; each answer word once;
the first 8 such sentences. Prints the YAML entries of ``eval.fill_examples``.
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--n", type=int, default=8)
    args = p.parse_args()
    from transformers import AutoTokenizer

    from avey_b.data.corpus import is_heldout, python_docs_corpus

    tok = AutoTokenizer.from_pretrained(args.tokenizer)
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
                        and w.rstrip(".,") not in used), None)
            if hit is None:
                continue
            answer = words[hit].rstrip(".,")
            words[hit] = words[hit].replace(answer, "[MASK]", 1)
            chosen.append({"text": " ".join(words), "answer": answer})
            used.add(answer)
            break
        if len(chosen) == args.n:
            break
    print("  fill_examples:")
    for c in chosen:
        print(f"    - {{text: {json.dumps(c['text'])}, answer: {c['answer']}}}")


if __name__ == "__main__":
    main()
