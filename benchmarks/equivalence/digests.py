"""Digests of everything the inference engine gives, to hold a refactor to "the same tensors, bit for bit".

Builds the tiny offline models of :mod:`avey_b.testing` (a masked-LM, a multi-vector head, a cross-encoder), runs
every way in to the engine in fp32 and bf16 — ``Encoder.encode``/``vectors``/``sparse``/``logits``/``multivectors``/
``maxsim``, embed's batches (dense, every output, late chunks), serve's batches of every job kind and its state
path through the prefix cache, embed's document states (new, then edited from their export), and
``Encoder.document`` with appends and edits — and writes one SHA-256 per result (of its dtype, shape and bytes) to a
JSON file. Run it on two checkouts and compare the files:

    PYTHONPATH=OLD python benchmarks/equivalence/digests.py --out old.json
    PYTHONPATH=NEW python benchmarks/equivalence/digests.py --out new.json
    python benchmarks/equivalence/digests.py --compare old.json new.json

It calls only what both sides of the refactor it was written for have (the API before issue 61's engine step).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

WORDS = ("the film was very good and the plot was awful with alice smith in paris today said bob "
         "a lovely story from new york music ending cast dreadful superb fine weak poor met berlin").split()


def digest(x) -> str:
    """SHA-256 over a result's arrays (dtype, shape, bytes), in order, whatever it nests them in."""
    h = hashlib.sha256()

    def walk(v):
        if isinstance(v, torch.Tensor):
            v = v.detach().cpu().numpy()
        if isinstance(v, np.ndarray):
            h.update(f"{v.dtype}{v.shape}".encode())
            h.update(np.ascontiguousarray(v).tobytes())
        elif isinstance(v, dict):
            for k in sorted(v):
                h.update(str(k).encode())
                walk(v[k])
        elif isinstance(v, (list, tuple)):
            h.update(f"[{len(v)}".encode())
            for item in v:
                walk(item)
        else:
            h.update(repr(v).encode())

    walk(x)
    return h.hexdigest()


def texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    lengths = [rng.choice((1, 3, 8, 20, 60, 150, 400)) for _ in range(n)]
    return [" ".join(rng.choice(WORDS) for _ in range(k)) for k in lengths]


def run(root: Path) -> dict[str, str]:
    from avey_b import testing
    from avey_b.apps.embed.embedder import embed_ids
    from avey_b.apps.embed.streamed import Pieces
    from avey_b.apps.serve.batcher import Job
    from avey_b.apps.serve.documents import Documents
    from avey_b.apps.serve.options import ServeOptions
    from avey_b.apps.serve.work import answer_batch
    from avey_b.inference.chunks import chunk_ranges
    from avey_b.inference.encoder import Encoder
    from avey_b.inference.options import LoadOptions

    out: dict[str, str] = {}
    sample = texts(12, seed=0)
    for kind in ("masked-lm", "multi-vector", "cross-encoder"):
        path = testing.served_model(str(root / kind), kind)
        for precision in ("fp32", "bf16"):
            enc = Encoder(path, LoadOptions(precision=precision, threads=1)).load()
            key = f"{kind}/{precision}"

            def put(name, value, key=key):
                out[f"{key}/{name}"] = digest(value)

            tok = enc.tokenize(sample, offsets=True)
            ids = tok["input_ids"]
            batch, mask = enc.pad(ids)
            put("encode", enc.encode(sample))
            put("encode.small-batches", enc.encode(sample, batch_tokens=256))
            put("encode.unnormalized", enc.encode(sample, normalize=False))
            put("embed", enc.embed(batch, mask))
            put("vectors", enc.vectors(batch, mask, enc.vector_outputs))
            for o in enc.vector_outputs:
                put(f"vectors.{o}", enc.vectors(batch, mask, (o,)))
            if "sparse" in enc.kinds:
                put("sparse", enc.sparse(batch, mask))
            if "multivector" in enc.kinds:
                put("multivectors", enc.multivectors(sample))
                put("maxsim", enc.maxsim(sample[0], sample[1:]))
            if "classify" in enc.kinds or "fill" in enc.kinds:
                put("logits", enc.logits(batch, mask))
            # embed's batches
            ranges = [chunk_ranges(o, s, chunk_tokens=6, overlap=2) for o, s in
                      zip(tok["offset_mapping"], tok["special_tokens_mask"], strict=True)]
            chunks = [[r[:2] for r in rs] for rs in ranges]
            put("embed_ids", embed_ids(enc, ids, None, 512))
            put("embed_ids.outputs", embed_ids(enc, ids, None, 512, tuple(enc.vector_outputs)))
            put("embed_ids.chunks", embed_ids(enc, ids, chunks, 512))
            # serve's batches, every job kind the checkpoint answers
            jobs = [Job("embed", row) for row in ids]
            serve_kinds = ["embed", "tokens", "chunks"] + [k for k in ("sparse", "multivector") if k in enc.kinds]
            serve_kinds += ["logits"] if "classify" in enc.kinds else []
            for job_kind in serve_kinds:
                extra = chunks if job_kind == "chunks" else [None] * len(ids)
                put(f"serve.{job_kind}", answer_batch(enc, job_kind, [Job(job_kind, j.ids, e) for j, e in
                                                                       zip(jobs, extra, strict=True)]))
            if "fill" in enc.kinds:
                masked = [row[:2] + [enc.tokenizer.mask_token_id] + row[3:] for row in ids if len(row) > 4]
                put("serve.fill", answer_batch(enc, "fill", [Job("fill", row) for row in masked]))
            # serve's state path: long inputs a block at a time, through the prefix cache
            long_ids = enc.tokenize([" ".join(sample)])["input_ids"][0]
            for block in (32, 64):  # (--block-tokens 0 ran a cached input one split at a time before issue 64 item 20)
                docs = Documents(enc, ServeOptions(block_tokens=block))
                got = [docs.vector(long_ids[:200]), docs.vector(long_ids[:200] + long_ids[1:150]),
                       docs.vector(long_ids[:200]), docs.vector(long_ids)]
                put(f"serve.states.block{block}", got)
                put(f"serve.states.block{block}.stats", sorted(docs.cache.stats().items()))
            # embed's document states: new, then edited from the saved export
            for chunking in ("none", "late"):
                settings = SimpleNamespace(chunking=chunking, chunk_tokens=6, chunk_overlap=2,
                                           chunk_spans_column=None, outputs=("dense",))
                pieces = Pieces(enc, settings)
                doc = enc.tokenize([" ".join(sample[:6])], offsets=True)
                row = doc["input_ids"][0]
                rng = chunk_ranges(doc["offset_mapping"][0], doc["special_tokens_mask"][0], chunk_tokens=6, overlap=2)
                vectors, state, computed = pieces.encode(row, rng)
                edited = enc.tokenize([" ".join(sample[:6]) + " and the end"], offsets=True)
                rng2 = chunk_ranges(edited["offset_mapping"][0], edited["special_tokens_mask"][0], chunk_tokens=6,
                                    overlap=2)
                again = pieces.encode(edited["input_ids"][0], rng2, state.export())
                put(f"embed.pieces.{chunking}", [vectors, computed, state.export(), again[0], again[2],
                                                 again[1].export()])
            # Encoder.document: appends and edits
            document = enc.document(" ".join(sample[:3]), chunk_tokens=5, chunk_overlap=1)
            seen = [document.vector(), document.chunks()]
            document.append(" and then " + sample[4])
            seen += [document.vector(), document.chunks(), document.tokens]
            document.replace(10, 14, "a lovely")
            seen += [document.vector(), document.chunks(), document.tokens, document.state.recomputed]
            put("document", seen)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="write the digests here (JSON)")
    parser.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"), help="compare two digest files")
    args = parser.parse_args(argv)
    if args.compare:
        old, new = (json.loads(Path(f).read_text()) for f in args.compare)
        differ = sorted(k for k in old.keys() & new.keys() if old[k] != new[k])
        missing = sorted(old.keys() ^ new.keys())
        print(f"{len(old.keys() & new.keys())} results in both: {len(differ)} differ; {len(missing)} in one only")
        for k in differ:
            print("  differs:", k)
        for k in missing:
            print("  in one only:", k)
        return 1 if differ or missing else 0
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        digests = run(Path(tmp))
    Path(args.out).write_text(json.dumps(digests, indent=1, sort_keys=True) + "\n")
    print(f"{len(digests)} digests -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
