"""``avey-b embed --update`` against a fresh run, and the peak memory of one long document (README.md has the results).

Update: the first ``--articles`` WikiText-2 validation articles (``--data``, from the shared data folder; never
committed) are the documents of a JSON-lines corpus: v1 holds all but the last; v2 changes every tenth document of
v1, in turn grown (a twentieth of its words, the first words of the next article, appended), grown, grown, edited
mid-way (twelve words from its middle replaced by twelve of the next article: the length changes, so everything
after the edit is recomputed), edited, removed; and adds the last article (new). ``--update`` first embeds v1
(keeping the states); then, alternated ``--repeats`` times in this process: a fresh run of v2 into a new directory,
``--update`` of a copy of the v1 output to v2 (the changes), and ``--update`` of that output to v2 again (nothing
changed), each timed (wall clock around :func:`avey_b.apps.embed.embed_corpus`, so no import is counted). The
outputs are compared (the largest difference between vectors), and the saved states' size beside the shards' is
recorded. ``--commands``: the same three, each as its own ``avey-b embed`` command (imports and model load
counted), alternated; and the imports alone (``python -c "import ..."``: torch, and embed's job).

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
DATA = HERE.parents[3] / "shared" / "data" / "wikitext-2" / "valid.tokens.txt"  # ../shared/data


def articles(path: Path) -> list[str]:
    """The articles of a WikiText file: the text from one `` = Title = `` line to the next."""
    out: list[list[str]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if re.fullmatch(r" = [^=].* = ", line):
            out.append([])
        if out and line.strip():
            out[-1].append(line.strip())
    return [" ".join(lines) for lines in out]


CHANGES = ("grown", "grown", "grown", "edited", "edited", "removed")


def corpora(texts: list[str]) -> tuple[list[dict], list[dict], dict]:
    """v1 (all articles but the last), v2 (every tenth of v1 changed in turn as :data:`CHANGES` says, the last
    article new) and what changed (kind -> count)."""
    v1 = [{"id": f"a{i:03d}", "text": t} for i, t in enumerate(texts[:-1])]
    v2, removed, done = [dict(r) for r in v1], set(), {"new": 1}
    for n, i in enumerate(range(0, len(v1), 10)):
        kind, words, other = CHANGES[n % len(CHANGES)], texts[i].split(), texts[i + 1].split()
        if kind == "grown":
            v2[i]["text"] += " " + " ".join(other[:max(1, len(words) // 20)])
        elif kind == "edited":
            mid = len(words) // 2
            v2[i]["text"] = " ".join(words[:mid] + other[:12] + words[mid + 12:])
        else:
            removed.add(v1[i]["id"])
        done[kind] = done.get(kind, 0) + 1
    v2 = [r for r in v2 if r["id"] not in removed] + [{"id": "new", "text": texts[-1]}]
    return v1, v2, done


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


def command_timed(model: str, source: Path, out: Path, threads: int, update: bool) -> float:
    """One ``avey-b embed`` command in its own process (imports and model load counted), timed."""
    t0 = time.perf_counter()
    subprocess.run([str(Path(sys.executable).parent / "avey-b"), "embed", model, str(source), str(out), "--precision",
                    "fp32", "--threads", str(threads), "--no-progress", *(["--update"] if update else [])],
                   check=True, capture_output=True)
    return time.perf_counter() - t0


#: What a command imports before its job runs: torch alone, and embed's job (the model's modules and transformers').
IMPORTS = ("torch", "avey_b.apps.embed.job")


def import_seconds(module: str, repeats: int) -> list[float]:
    """Wall seconds of ``python -c "import MODULE"``, each in a new process."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", f"import {module}"], check=True, capture_output=True)
        times.append(round(time.perf_counter() - t0, 2))
    return times


def update_benchmark(args) -> dict:
    from avey_b.apps.embed import EmbedOptions
    from avey_b.inference.options import LoadOptions
    from avey_b.utils.records import Envelope

    work = Path(args.workdir or tempfile.mkdtemp(prefix="update-bench-"))
    v1, v2, changes = corpora(articles(Path(args.data))[:args.articles])
    write_jsonl(work / "v1.jsonl", v1)
    write_jsonl(work / "v2.jsonl", v2)
    plain = EmbedOptions(load=LoadOptions(precision="fp32", threads=args.threads), progress=False)
    update = EmbedOptions(load=LoadOptions(precision="fp32", threads=args.threads), progress=False, update=True)
    env = Envelope.begin()
    first_seconds, first = timed(args.model, work / "v1.jsonl", work / "v1-out", update)
    seconds, diff = {"fresh": [], "update": [], "unchanged": []}, 0.0
    for r in range(args.repeats):  # alternated
        t, manifest = timed(args.model, work / "v2.jsonl", work / f"fresh-{r}", plain)
        seconds["fresh"].append(t)
        shutil.copytree(work / "v1-out", work / f"update-{r}")
        t, done = timed(args.model, work / "v2.jsonl", work / f"update-{r}", update)
        seconds["update"].append(t)
        t, again = timed(args.model, work / "v2.jsonl", work / f"update-{r}", update)
        seconds["unchanged"].append(t)
        diff = max(diff, max_difference(work / f"fresh-{r}", work / f"update-{r}"))
    commands = {"fresh": [], "update": [], "unchanged": []}
    for r in range(args.repeats if args.commands else 0):  # the same, as commands
        commands["fresh"].append(command_timed(args.model, work / "v2.jsonl", work / f"c-fresh-{r}", args.threads,
                                               False))
        shutil.copytree(work / "v1-out", work / f"c-update-{r}")
        commands["update"].append(command_timed(args.model, work / "v2.jsonl", work / f"c-update-{r}",
                                                args.threads, True))
        commands["unchanged"].append(command_timed(args.model, work / "v2.jsonl", work / f"c-update-{r}",
                                                   args.threads, True))
    tokens = manifest["counts"]["tokens"]
    record = {
        "benchmark": "embed --update", "model": args.model, "threads": args.threads,
        "documents": {"v1": len(v1), "v2": len(v2), **changes}, "tokens": tokens,
        "first_update_run_seconds": round(first_seconds, 2),
        "seconds": {k: [round(x, 2) for x in v] for k, v in seconds.items()},
        "speedup": round(min(seconds["fresh"]) / min(seconds["update"]), 1),
        "unchanged_fraction_of_fresh": round(min(seconds["unchanged"]) / min(seconds["fresh"]), 3),
        "update": done["runs"][-1]["update"], "unchanged_update": again["runs"][-1]["update"],
        "state": done["state"], "state_bytes_per_token": round(done["state"]["bytes"] / tokens, 1),
        "max_vector_difference": diff, "command": " ".join(sys.argv), **env.end()}
    if args.commands:
        record["command_seconds"] = {k: [round(x, 2) for x in v] for k, v in commands.items()}
        record["import_seconds"] = {m: import_seconds(m, args.repeats) for m in IMPORTS}
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
    p.add_argument("--articles", type=int, default=60, help="the first N articles (v1: all but the last)")
    p.add_argument("--commands", action="store_true", help="also time each as its own avey-b embed command")
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
