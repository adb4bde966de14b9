"""The bundled Python docs plus the standard library's comment blocks, as one ``.jsonl`` (for the ``b1k-comments``
variant of ``run.py``: does more text of the same kind help the quickstart?).

    python benchmarks/quickstart_recipes/comments_corpus.py --out runs/corpus_plus/docs.jsonl

The docs come first, unchanged (so their held-out 5% is the same documents); then one document per stdlib file:
its runs of consecutive ``#`` comment lines joined into paragraphs, keeping those of at least 40 characters that
start with a letter and are less than 5% code characters, each paragraph once across files; files with under
200 characters of such text are skipped. On Python 3.11: 2,391 docs (1.67M characters) + 371 files (0.91M).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sysconfig
import tokenize
from pathlib import Path

from select_fill import CODE  # the fill-mask rule's code characters (this folder is on sys.path)

from avey_b.data.corpus import _SKIP_DIRS, python_docs_corpus


def comment_documents() -> list[str]:
    seen: set[str] = set()
    documents = []
    root = Path(sysconfig.get_paths()["stdlib"])
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        for fn in sorted(f for f in filenames if f.endswith(".py")):
            try:
                src = Path(dirpath, fn).read_text(encoding="utf-8")
                comments = [t for t in tokenize.generate_tokens(io.StringIO(src).readline)
                            if t.type == tokenize.COMMENT]
            except (SyntaxError, UnicodeDecodeError, ValueError, tokenize.TokenError):
                continue
            blocks, current, last = [], [], -5
            for t in comments:
                if t.start[0] != last + 1 and current:
                    blocks.append(" ".join(current))
                    current = []
                if line := t.string.lstrip("#").strip():
                    current.append(line)
                last = t.start[0]
            if current:
                blocks.append(" ".join(current))
            keep = []
            for text in blocks:
                key = " ".join(text.split())
                if len(text) < 40 or not text[0].isalpha() or sum(c in CODE for c in text) > 0.05 * len(text):
                    continue
                if key not in seen:
                    seen.add(key)
                    keep.append(text)
            if len(document := "\n\n".join(keep)) >= 200:
                documents.append(document)
    return documents


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    args = p.parse_args()
    docs, extra = python_docs_corpus(), comment_documents()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w") as f:
        for d in [*docs, *extra]:
            f.write(json.dumps({"text": d}) + "\n")
    print(f"{len(docs)} docs ({sum(map(len, docs)):,} chars) + "
          f"{len(extra)} comment files ({sum(map(len, extra)):,} chars) -> {args.out}")


if __name__ == "__main__":
    main()
