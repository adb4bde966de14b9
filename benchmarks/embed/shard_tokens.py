"""How many tokens is a minute of `avey-b embed` on this machine? The figure behind `--shard-tokens`' default.

    python benchmarks/embed/shard_tokens.py --data ../shared/data --workdir runs/shard_tokens   # ~3-6 min here

A shard is the unit a kill loses, so its default size in tokens is chosen as about a minute of work on a CPU. For
each preset (random weights, seed 0; the toy WordPiece tokenizer of `avey_b.testing`, so the figure is the backbone's
cost per token, whatever the vocabulary), the whole `embed_corpus` job (reading, tokenizing, batching, the forwards
under the library's precision policy, writing Parquet) runs over WikiText-2 valid paragraphs grouped into documents
of about `--doc-words` words, and the rate is the manifest's tokens over the job's seconds. One JSON line per preset
goes to stdout and to `results.jsonl` beside this script, with the command, machine, thread count, date and the
load average before and after (the machine may be shared: read each figure with its load).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path


def documents(data: Path, doc_words: int, words: int) -> list[str]:
    """WikiText-2 valid's non-heading lines, joined into documents of about ``doc_words`` words, ``words`` in all."""
    lines = [ln.strip() for ln in (data / "wikitext-2" / "valid.tokens.txt").read_text(encoding="utf-8").splitlines()
             if ln.strip() and not ln.strip().startswith("=")]
    docs, current, total = [], [], 0
    for line in lines:
        current.extend(line.split())
        if len(current) >= doc_words:
            docs.append(" ".join(current[:doc_words]))
            total += doc_words
            current = current[doc_words:]
            if total >= words:
                break
    return docs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="../shared/data")
    p.add_argument("--workdir", default="runs/shard_tokens")
    p.add_argument("--presets", nargs="+", default=["small", "base"])
    p.add_argument("--doc-words", type=int, default=400)
    p.add_argument("--words", type=int, nargs="+", default=[12_000, 4_000], help="corpus size per preset")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    args = p.parse_args(argv)

    import torch

    from avey_b import AveyBForSentenceEmbedding, LoadOptions
    from avey_b import testing as toy
    from avey_b.apps.embed import EmbedOptions, embed_corpus
    from avey_b.model import presets
    from avey_b.utils.records import Envelope, append_jsonl

    torch.set_num_threads(args.threads)
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    for name, words in zip(args.presets, args.words * len(args.presets), strict=False):
        model_dir = work / f"model-{name}"
        if not (model_dir / "config.json").exists():
            tok = toy.tokenizer(str(model_dir))
            torch.manual_seed(0)
            AveyBForSentenceEmbedding(presets.get(name, vocab_size=len(tok))).save_pretrained(model_dir)
        corpus = work / f"corpus-{words}.jsonl"
        corpus.write_text("".join(json.dumps({"text": d}) + "\n" for d in documents(Path(args.data), args.doc_words,
                                                                                    words)))
        env = Envelope.begin()
        with tempfile.TemporaryDirectory(dir=work) as out:
            manifest = embed_corpus(str(model_dir), str(corpus), Path(out) / "v", EmbedOptions(progress=False,
                                                                                               load=LoadOptions(device="cpu")))
        counts, job = manifest["counts"], manifest["runs"][-1]
        rate = counts["tokens"] / job["seconds"]
        record = {"preset": name, "hidden_size": manifest["model"]["dim"], "documents": counts["documents"],
                  "tokens": counts["tokens"], "seconds": job["seconds"], "tokens_per_s": round(rate),
                  "tokens_per_minute": round(60 * rate), "precision": manifest["settings"]["precision"],
                  "threads": args.threads, "command": " ".join([Path(sys.executable).name, *sys.argv]), **env.end()}
        print(json.dumps(record), flush=True)
        append_jsonl(Path(__file__).with_name("results.jsonl"), {"section": "shard_tokens", **record})
    return 0


if __name__ == "__main__":
    sys.exit(main())
