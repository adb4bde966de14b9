"""``avey-b embed --update`` against a fresh run, and the peak memory of one long document (README.md has the results).

Update: the WikiText-2 validation articles (``--data``, from the shared data folder; never committed) are the
documents of a JSON-lines corpus, v1; v2 is v1 with a tenth of the articles (every tenth) grown by a twentieth of
their words (the first words of another article appended). ``--update`` first embeds v1 (keeping the states); then,
alternated ``--repeats`` times in this process, a fresh run of v2 into a new directory and ``--update`` of a copy of
the v1 output to v2, each timed (wall clock around :func:`avey_b.apps.embed.embed_corpus`). Both outputs are
compared (the largest difference between vectors), and the saved states' size beside the shards' is recorded.

Memory (``--memory``): one document of ``--memory-tokens`` tokens of repeated text, embedded by ``avey-b embed`` in
a child process each, today's whole forward (``--long-document-tokens`` above the length) and in pieces; each child
reports its peak RSS (``ru_maxrss``) and time. The model: ``presets.small`` 128 wide with ``--memory-layers``
layers and the quickstart model's tokenizer, saved to the work directory.

    python benchmarks/streaming/update/run.py --model /work/qs/model --threads 1
    python benchmarks/streaming/update/run.py --memory --memory-tokens 262144
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE.parents[3].parent / "shared" / "data" / "wikitext-2" / "valid.tokens.txt"  # ../shared/data


def articles(path: Path) -> list[str]:
    """The articles of a WikiText file: the text from one `` = Title = `` line to the next."""
    out: list[list[str]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if re.fullmatch(r" = [^=].* = ", line):
            out.append([])
        if out and line.strip():
            out[-1].append(line.strip())
    return [" ".join(lines) for lines in out]


def corpora(texts: list[str]) -> tuple[list[dict], list[dict]]:
    """v1 (the articles) and v2 (every tenth grown by a twentieth of its words, from the next article)."""
    v1 = [{"id": f"a{i:03d}", "text": t} for i, t in enumerate(texts)]
    v2 = [dict(r) for r in v1]
    for i in range(0, len(v2), 10):
        extra = texts[(i + 1) % len(texts)].split()[:max(1, len(texts[i].split()) // 20)]
        v2[i]["text"] += " " + " ".join(extra)
    return v1, v2


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def timed(model: str, source: Path, out: Path, options) -> tuple[float, dict]:
    from avey_b.apps.embed import embed_corpus

    t0 = time.perf_counter()
    manifest = embed_corpus(model, str(source), str(out), options)
    return time.perf_counter() - t0, manifest


def max_difference(a: Path, b: Path) -> float:
    import numpy as np
    import pyarrow.parquet as pq

    ta, tb = pq.read_table(a), pq.read_table(b)
    assert ta["id"].to_pylist() == tb["id"].to_pylist()
    return float(np.abs(np.array(ta["vector"].to_pylist()) - np.array(tb["vector"].to_pylist())).max())


def update_benchmark(args) -> dict:
    from avey_b.apps.embed import EmbedOptions
    from avey_b.inference.options import LoadOptions
    from avey_b.utils.records import Envelope

    work = Path(args.workdir or tempfile.mkdtemp(prefix="update-bench-"))
    v1, v2 = corpora(articles(Path(args.data)))
    write_jsonl(work / "v1.jsonl", v1)
    write_jsonl(work / "v2.jsonl", v2)
    plain = EmbedOptions(load=LoadOptions(precision="fp32", threads=args.threads), progress=False)
    update = EmbedOptions(load=LoadOptions(precision="fp32", threads=args.threads), progress=False, update=True)
    env = Envelope.begin()
    first_seconds, first = timed(args.model, work / "v1.jsonl", work / "v1-out", update)
    fresh, updated, diff = [], [], 0.0
    for r in range(args.repeats):  # alternated
        seconds, manifest = timed(args.model, work / "v2.jsonl", work / f"fresh-{r}", plain)
        fresh.append(seconds)
        shutil.copytree(work / "v1-out", work / f"update-{r}")
        seconds, done = timed(args.model, work / "v2.jsonl", work / f"update-{r}", update)
        updated.append(seconds)
        diff = max(diff, max_difference(work / f"fresh-{r}", work / f"update-{r}"))
    record = {
        "benchmark": "embed --update", "model": args.model, "threads": args.threads,
        "documents": len(v2), "grown": len(range(0, len(v2), 10)), "tokens": manifest["counts"]["tokens"],
        "first_update_run_seconds": round(first_seconds, 2), "fresh_seconds": [round(s, 2) for s in fresh],
        "update_seconds": [round(s, 2) for s in updated], "speedup": round(min(fresh) / min(updated), 1),
        "update": done["runs"][-1]["update"], "state": done["state"], "max_vector_difference": diff,
        "command": " ".join(sys.argv), **env.end()}
    if not args.workdir:
        shutil.rmtree(work)
    return record


def memory_model(work: Path, layers: int) -> Path:
    """presets.small, 128 wide with ``layers`` layers, and the quickstart tokenizer."""
    from avey_b import AveyBForSentenceEmbedding
    from avey_b.model import presets
    from avey_b.testing import seeded

    directory = work / "model-128"
    for name in ("tokenizer.json", "tokenizer_config.json"):
        directory.mkdir(parents=True, exist_ok=True)
        shutil.copy(Path("/work/qs/model") / name, directory / name)
    seeded(AveyBForSentenceEmbedding, presets.small(vocab_size=4096, hidden_size=128,
                                                    num_hidden_layers=layers)).save_pretrained(directory)
    return directory


def memory_child(args) -> None:
    """One long document embedded (whole or in pieces); prints peak RSS (MB) and seconds as JSON."""
    from avey_b.apps.embed import EmbedOptions, embed_corpus
    from avey_b.inference.options import LoadOptions

    t0 = time.perf_counter()
    manifest = embed_corpus(args.model, args.source, args.out, EmbedOptions(
        load=LoadOptions(precision="fp32", threads=args.threads), progress=False, max_tokens=1 << 30,
        long_document_tokens=1 << 40 if args.memory_child == "whole" else 32768))
    print(json.dumps({"path": args.memory_child, "tokens": manifest["counts"]["tokens"],
                      "seconds": round(time.perf_counter() - t0, 1),
                      "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}))


def memory_benchmark(args) -> dict:
    from transformers import AutoTokenizer

    from avey_b.utils.records import Envelope

    work = Path(args.workdir or tempfile.mkdtemp(prefix="memory-bench-"))
    model = memory_model(work, args.memory_layers)
    tok = AutoTokenizer.from_pretrained(model)
    sentence = articles(Path(args.data))[0][:2000]
    per = len(tok(sentence, add_special_tokens=False)["input_ids"])
    text = " ".join([sentence] * (args.memory_tokens // per + 1))
    write_jsonl(work / "long.jsonl", [{"id": "long", "text": text}])
    env, rows = Envelope.begin(), []
    for path in ("whole", "pieces"):
        done = subprocess.run([sys.executable, __file__, "--memory-child", path, "--model", str(model), "--source",
                               str(work / "long.jsonl"), "--out", str(work / f"out-{path}"), "--threads",
                               str(args.threads)], capture_output=True, text=True, check=True)
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    diff = max_difference(work / "out-whole", work / "out-pieces")
    if not args.workdir:
        shutil.rmtree(work)
    return {"benchmark": "embed memory, one long document", "model": f"presets.small 128 wide, "
            f"{args.memory_layers} layers", "runs": rows, "max_vector_difference": diff,
            "command": " ".join(sys.argv), **env.end()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="/work/qs/model")
    p.add_argument("--data", default=str(DATA))
    p.add_argument("--workdir", default=None, help="keep the corpora and outputs here (default: a removed temp dir)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--memory", action="store_true")
    p.add_argument("--memory-tokens", type=int, default=262144)
    p.add_argument("--memory-layers", type=int, default=2)
    p.add_argument("--memory-child", choices=("whole", "pieces"), help=argparse.SUPPRESS)
    p.add_argument("--source", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    p.add_argument("--results", default=str(HERE / "results.jsonl"))
    args = p.parse_args()
    if args.memory_child:
        return memory_child(args)
    from avey_b.utils.records import append_jsonl

    append_jsonl(args.results, memory_benchmark(args) if args.memory else update_benchmark(args), echo=True)


if __name__ == "__main__":
    main()
