"""The model's side of the server: what one batch of inputs of one kind computes (run on the batcher's thread), and
the small numeric steps the routes apply to it (normalization, Matryoshka truncation, scores)."""

from __future__ import annotations

import base64

import numpy as np
import torch
from fastapi import HTTPException

from avey_b.apps.serve.batcher import Job
from avey_b.inference.encoder import Encoder

#: the most tokens a fill-mask answer lists per [MASK] (the request's top_k is at most this)
FILL_TOP = 50
#: the kinds of job that are one of the encoder's outputs (:meth:`Encoder.vectors`): kind -> output
VECTORS = {"embed": "dense", "chunks": "dense", "sparse": "sparse", "multivector": "multivector"}


@torch.no_grad()
def answer_batch(encoder: Encoder, kind: str, jobs: list[Job]) -> list:
    """The answers to one batch of jobs of one ``kind``, float32 numpy arrays unless said:

    * ``embed``: (d,) masked mean of the backbone's last hidden state, not normalized (the route normalizes);
    * ``tokens``: (n, d) the last hidden state of each of the input's n tokens;
    * ``multivector``: (n, D) the multi-vector head's unit vector of each of the input's n tokens;
    * ``chunks``: (C, d) late chunking, the mean of each chunk's token states (``job.extra``: token ranges);
    * ``logits``: (num_labels,) the classifier's logits;
    * ``fill``: per [MASK] of the input, its top tokens ``[{"token", "score"}]`` (Python lists);
    * ``sparse``: SPLADE's ``(indices, values)`` of the input (:meth:`Encoder.sparse`: the whole input in one
      forward, the max over its tokens taken chunk by chunk through the masked-LM head)."""
    ids = [j.ids for j in jobs]
    batch, mask = encoder.pad(ids)
    if kind in VECTORS:  # Encoder.vectors: the route normalizes after cutting (Matryoshka)
        found = encoder.vectors(batch, mask, (VECTORS[kind],), normalize=False,
                                chunks=[j.extra for j in jobs] if kind == "chunks" else None)[VECTORS[kind]]
        return [tuple(x.numpy() for x in v) if kind == "sparse" else v.numpy() for v in found]
    if kind == "tokens":
        hidden = encoder.hidden_states(batch, mask).float().cpu().numpy()
        return [hidden[i, :len(row)] for i, row in enumerate(ids)]
    logits = encoder.logits(batch, mask)
    if kind == "logits":
        return list(logits.numpy())
    tokenizer, out = encoder.tokenizer, []  # fill: the top tokens at each [MASK] of each input
    for i, row in enumerate(ids):
        per_mask = []
        for position in (p for p, token in enumerate(row) if token == tokenizer.mask_token_id):
            scores, tokens = logits[i, position].softmax(-1).topk(min(FILL_TOP, logits.shape[-1]))
            per_mask.append([{"token": tokenizer.decode([int(t)]).strip(), "score": float(v)}
                             for v, t in zip(scores, tokens, strict=True)])
        out.append(per_mask)
    return out


#: ``encoding_format``: float32 values as JSON numbers, or their little-endian bytes base64-encoded (the openai
#: SDK's default, which it decodes)
ENCODINGS = {"float": lambda v: v.tolist(),
             "base64": lambda v: base64.b64encode(v.astype("<f4").tobytes()).decode("ascii")}


def encoding(encoding_format: str):
    """How a route writes its vectors for ``encoding_format`` (:data:`ENCODINGS`); another value: 400."""
    if encoding_format not in ENCODINGS:
        raise HTTPException(400, f"encoding_format must be one of {sorted(ENCODINGS)}, got {encoding_format!r}")
    return ENCODINGS[encoding_format]


def finish_vector(vector: np.ndarray, dimensions: int | None, normalize: bool) -> np.ndarray:
    """A pooled vector cut to its first ``dimensions`` values (Matryoshka; None: all), then L2-normalized (as
    ``torch.nn.functional.normalize``: divided by max(norm, 1e-12)) when ``normalize``."""
    vector = vector[:dimensions].astype(np.float32)
    if normalize:
        vector = vector / max(float(np.linalg.norm(vector)), 1e-12)
    return vector


#: the class that scores a query after a document of any length (:meth:`Encoder.score`), not in padded batches
QUERY_LAST = "AveyBForQueryLastScoring"


def scored_after(encoder: Encoder, query: str, documents: list):
    """A job in steps (:meth:`avey_b.apps.serve.service.Service.compute`): ``query`` scored after each document by
    a query-last scorer (:meth:`Encoder.score`: the query's splits alone, with the evidence), one document a step,
    so that other requests' batches run between them. Its value: the :class:`~avey_b.inference.encoder.Relevance`
    of each document."""
    out = []
    for document in documents:
        out.append(encoder.score(query, document))
        yield
    return out


def evidence_of(relevance) -> list[dict]:
    """A :class:`~avey_b.inference.encoder.Relevance`'s evidence as the routes answer it."""
    return [{"start": e.start, "end": e.end, "score": e.score} for e in relevance.evidence]


def scores(logits: np.ndarray, raw: bool) -> np.ndarray:
    """Scores of one input's logits: the logits themselves when ``raw``; else the sigmoid of a single logit (what
    sentence-transformers' ``CrossEncoder.predict`` returns for one label) or the softmax over several."""
    logits = logits.astype(np.float64)
    if raw:
        return logits
    if logits.shape[-1] == 1:
        return 1 / (1 + np.exp(-logits))
    e = np.exp(logits - logits.max())
    return e / e.sum()
