"""The multi-vector (late interaction) head: one small unit vector per token, scored by MaxSim.

ColBERT's late interaction (Khattab & Zaharia, 2020) is the measure Avey-B's ranker already uses between splits
(§3.1): ``MaxSim(q, d) = Σ_{t∈q} max_{u∈d} cos(x_t, x_u)``. This head gives every token of a text its own vector
for it — the backbone's last hidden state ``h_t`` projected to ``D = config.multivector_dim`` (128 by default) by a
linear map ``W`` (no bias) and normalized, ``x_t = W h_t / ‖W h_t‖`` — and scores a query against documents with the
library's one MaxSim, :func:`avey_b.model.similarity.maxsim`.

Every real token has a vector, the tokenizer's special tokens included (as sentence-transformers' ``MultiVectorEncoder``
keeps them); padding has the zero vector. Queries and documents are encoded alike: no query or document marker, no
query expansion (the defaults of a ``MultiVectorEncoder`` built on a plain transformer).

Its saved directory is also a sentence-transformers ``MultiVectorEncoder`` (:func:`avey_b.model.loading.
sentence_transformers_files`): the backbone, the projection as a token-level ``Dense`` and a token-level
``Normalize``, which give the same vectors. sentence-transformers' own multi-vector encoder is the standard this
head loads in: it is maintained with the library the project already depends on, it trains with
``MultiVectorEncoderTrainer`` and its late-interaction losses, and it loads PyLate's and Stanford ColBERT's saved
models too (PyLate, the older ColBERT library, is built on an older sentence-transformers).

Notation: B batch, N tokens, d hidden size, D ``multivector_dim``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from transformers.modeling_outputs import ModelOutput

from .configuration import AveyBConfig
from .heads import _finish, contrastive_loss_of_scores
from .modeling import AveyBModel, AveyBPreTrainedModel
from .similarity import maxsim, unit_vectors


@dataclass
class MultiVectorOutput(ModelOutput):
    """``loss`` (with ``labels``: :func:`late_interaction_loss`; first, as in every transformers output with a
    loss), ``embeddings``: (B, N, D) unit token vectors, zero at padding, then the backbone's outputs."""

    loss: torch.FloatTensor | None = None
    embeddings: torch.FloatTensor | None = None
    last_hidden_state: torch.FloatTensor | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None


def token_vectors(hidden: torch.Tensor, projection: nn.Linear, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """(B, N, d) hidden states -> (B, N, D) unit vectors ``W h_t / ‖W h_t‖``, zero where ``attention_mask`` is 0."""
    vectors = unit_vectors(projection(hidden))
    return vectors if attention_mask is None else vectors * attention_mask.unsqueeze(-1).to(vectors.dtype)


def late_interaction_scores(q: torch.Tensor, q_keep: torch.Tensor, d: torch.Tensor,
                            d_keep: torch.Tensor) -> torch.Tensor:
    """MaxSim of every query against every document: q (Bq, Nq, D), d (Bd, Nd, D) unit vectors with their real-token
    masks -> (Bq, Bd) float32 scores (:func:`avey_b.model.similarity.maxsim`, each text one split)."""
    return maxsim(q[None], d[None], q_keep[None].bool(), d_keep[None].bool())[0]


def late_interaction_loss(vectors: torch.Tensor, keep: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """In-batch contrastive loss over MaxSim: vectors (B, N, D) unit token vectors, keep (B, N) their real-token mask,
    labels (B,). Every input is scored as a query against every other input as a document
    (:func:`late_interaction_scores`); inputs sharing a label are its positives, the others its negatives, and the
    loss is the cross-entropy of those scores, unscaled (temperature 1), averaged over the inputs that have a
    positive (:func:`avey_b.model.heads.contrastive_loss_of_scores`). Give an (anchor, positive) pair one label;
    an input whose label no other input shares (a hard negative) is only a negative."""
    return contrastive_loss_of_scores(late_interaction_scores(vectors, keep, vectors, keep), labels)


def query_scores(query: torch.Tensor, documents: list[torch.Tensor]) -> torch.Tensor:
    """MaxSim of one query's token vectors (n, D) against each document's (m_j, D), real tokens only -> (J,) float32
    scores in the documents' order (:func:`late_interaction_scores` over the documents padded with zero rows)."""
    if not documents:
        return torch.empty(0)
    d = torch.nn.utils.rnn.pad_sequence(documents, batch_first=True)  # (J, M, D)
    keep = torch.nn.utils.rnn.pad_sequence([torch.ones(len(x), dtype=torch.bool) for x in documents],
                                           batch_first=True)
    return late_interaction_scores(query[None], torch.ones(1, len(query), dtype=torch.bool), d, keep)[0]


class AveyBForMultiVector(AveyBPreTrainedModel):
    """Token vectors for late-interaction retrieval (see the module docstring): ``embeddings`` (B, N, D).

    Any Avey-B checkpoint loads into it (the projection starts fresh: train it with ``avey-b finetune --task
    multi-vector``, which trains it with sentence-transformers' late-interaction losses).

    With ``labels`` (B,), ``loss`` is :func:`late_interaction_loss`, the in-batch contrastive loss of
    :class:`avey_b.AveyBForSentenceEmbedding` with MaxSim in place of scaled cosine: inputs sharing a label are
    pulled together, the others pushed apart. It is ColBERT's training objective, a softmax cross-entropy over
    MaxSim scores (Khattab & Zaharia, 2020, "ColBERT"), with the batch's other inputs as negatives, as in the
    late-interaction MultipleNegativesRankingLoss of sentence-transformers at its default temperature of 1 (MaxSim
    is a sum over query tokens, not a cosine, so it is not scaled up). A head with trained weights is not a base
    model, and transformers' common tests train every class outside its base-model mapping: with the loss, this
    head trains under ``Trainer`` or a plain loop as every other Avey-B head does.
    """

    def __init__(self, config: AveyBConfig):
        super().__init__(config)
        self.model = AveyBModel(config)
        self.projection = nn.Linear(config.hidden_size, config.multivector_dim, bias=False)
        self.post_init()

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> MultiVectorOutput | tuple:
        out = self.model(input_ids, attention_mask, inputs_embeds, output_hidden_states, return_dict=True)
        vectors = token_vectors(out.last_hidden_state, self.projection, attention_mask)
        loss = None
        if labels is not None:
            keep = (torch.ones(vectors.shape[:2], dtype=torch.bool, device=vectors.device) if attention_mask is None
                    else attention_mask.bool())
            loss = late_interaction_loss(vectors, keep, labels)
        output = MultiVectorOutput(loss=loss, embeddings=vectors, last_hidden_state=out.last_hidden_state,
                                   hidden_states=out.hidden_states)
        return _finish(output, return_dict, self.config)
