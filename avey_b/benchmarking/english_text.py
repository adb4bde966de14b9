"""The real English text the long-input benchmarks time on, as one plain-text file.

    python -m avey_b.benchmarking.english_text --data ../shared/data --out runs/english.txt

From ``--data`` (the layout of the project's shared data; any directory with the same files works): WikiText-2
valid, tiny-shakespeare, the CoNLL-2003 training sentences (words joined by spaces) and the SST-2 training
sentences, in that order — about 1.3M cl100k tokens, enough for a 1M-token input without repeating text.
``avey-b bench run --text FILE`` tokenizes it (cl100k_base by default) and renumbers the ids into each model's
vocabulary (:mod:`avey_b.benchmarking.inputs`). Standard library only: a benchmark's torch-free process can call
:func:`english_text`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from avey_b.data.conll import read_conll


def english_text(data: Path) -> str:
    """The four sources joined by newlines (see the module docstring)."""
    need = ["wikitext-2/valid.tokens.txt", "tinyshakespeare/input.txt", "conll2003/eng.train", "sst2/train.tsv"]
    missing = [p for p in need if not (data / p).is_file()]
    if missing:
        raise SystemExit(f"{data}: missing {', '.join(missing)} (pass --data DIR with the shared data's layout)")
    texts = [(data / need[0]).read_text(), (data / need[1]).read_text()]
    texts.append("\n".join(" ".join(s.tokens) for s in read_conll(str(data / need[2]))))
    texts.append("\n".join(row.split("\t")[0] for row in (data / need[3]).read_text().splitlines()[1:]))
    return "\n".join(texts)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=Path("../shared/data"))
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(english_text(args.data))
    print(args.out)


if __name__ == "__main__":
    main()
