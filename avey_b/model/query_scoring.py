"""A long-document reranker: a query placed after a document of any length, scored at the cost of the query.

With the ranker on the token embeddings (§3.1, the default ``ranker_placement``) and unidirectional (the paper's
choice, §5.2), a split's outputs depend only on its own tokens and on the *embeddings* of the ``k`` splits it
chooses, never on the document's processed outputs. Put the query after the document and its outputs need only the
query's splits, ranked against the document's token ids, and the splits they choose
(:func:`avey_b.model.streaming.query_last`): the processor runs the query's rows whatever the document's length, in
training as in inference, and the chosen splits are where the model looked (:meth:`QueryLast.evidence`).

:class:`AveyBForQueryLastScoring` pools the query's last hidden state into a relevance logit. Its input is the
tokenizer's pair encoding of ``(document, query)``, document first (``[CLS] document [SEP] query [SEP]`` for a
BERT-style tokenizer), whose ``token_type_ids`` mark the query. It is not one of the transformers Auto classes (a
sequence classifier pools every token, this head the query's only); the sequence classifier refuses its checkpoint
by name.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers.modeling_outputs import SequenceClassifierOutput

from .configuration import AveyBConfig
from .heads import _classification_loss, _finish
from .modeling import AveyBModel, AveyBPreTrainedModel
from .streaming import DocumentState, QueryLast, query_last


class AveyBForQueryLastScoring(AveyBPreTrainedModel):
    """The mean of the query's last hidden state -> dropout -> linear: one logit per label (``num_labels=1``: a
    relevance score), for a query placed after a document of any length (module docstring).

    ``forward`` takes the pair encoding of ``(document, query)``: ``token_type_ids`` 1 at the query's tokens, which
    end each row's real tokens (padding on either side, ``attention_mask`` 0). Each row runs
    :func:`~avey_b.model.streaming.query_last`, so its cost is the query's; the logits equal those of the query's
    positions of a full forward. ``labels``: with one label, a relevance in [0, 1] (binary cross-entropy on the
    logit); with more, as :class:`~avey_b.model.heads.AveyBForSequenceClassification`'s.

    :meth:`score_state` scores token ids placed after a :class:`~avey_b.model.streaming.DocumentState` (a document
    kept between queries) and returns the evidence too."""

    def __init__(self, config: AveyBConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.model = AveyBModel(config)
        self.dropout = nn.Dropout(config.classifier_dropout)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        return_dict: bool | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        position_ids: torch.Tensor | None = None,  # accepted and unused, as by the backbone
        output_attentions: bool | None = None,
        **kwargs,
    ) -> SequenceClassifierOutput | tuple:
        if input_ids is None or inputs_embeds is not None:
            raise ValueError("AveyBForQueryLastScoring takes input_ids, not inputs_embeds: the query's splits are "
                             "ranked against the document's token ids")
        if output_hidden_states:
            raise ValueError("AveyBForQueryLastScoring computes the query's last hidden state only: no hidden states")
        if token_type_ids is None:
            raise ValueError("AveyBForQueryLastScoring needs token_type_ids marking the query (1 at its tokens): "
                             "encode the pair (document, query), document first, with them: tokenizer(documents, "
                             "queries, return_token_type_ids=True)")
        logits = torch.stack([self.logits_of(self._query(input_ids, attention_mask, token_type_ids, r))
                              for r in range(input_ids.shape[0])])
        loss = None
        if labels is not None:
            if self.num_labels == 1:
                loss = F.binary_cross_entropy_with_logits(logits.float().squeeze(-1), labels.float().reshape(-1))
            else:
                loss = _classification_loss(self.config, logits, labels)
        return _finish(SequenceClassifierOutput(loss=loss, logits=logits), return_dict, self.config)

    @torch.no_grad()
    def score_state(self, state: DocumentState, query_ids) -> tuple[torch.Tensor, QueryLast]:
        """The logits (num_labels,) of the token ids ``query_ids`` (the query and its closing special token, e.g.
        ``query [SEP]``) placed after the document ``state`` holds (its ids ``[CLS] document [SEP]``), and the
        query's :class:`~avey_b.model.streaming.QueryLast` (its choice: :meth:`~QueryLast.evidence`). The state is
        left as it was; it must have been made with this scorer or its backbone."""
        if state.model is not self.model:
            raise ValueError("this document state was made with another model: make it with the scorer (or its "
                             "backbone, scorer.model)")
        out = state.query(query_ids)
        return self.logits_of(out), out

    def logits_of(self, out: QueryLast) -> torch.Tensor:
        """(num_labels,) the logits of a query's outputs: the mean of its last hidden state, dropout, the linear
        classifier."""
        return self.classifier(self.dropout(out.hidden.mean(0)))

    def _query(self, input_ids, attention_mask, token_type_ids, r: int) -> QueryLast:
        """Row ``r``'s query after its document, from the query's splits (:func:`query_last`)."""
        ids, types = input_ids[r], token_type_ids[r]
        if attention_mask is not None:
            real = attention_mask[r].bool()
            ids, types = ids[real], types[real]
        query = types.bool()
        if not bool(query.any()):
            raise ValueError(f"row {r} has no query token (token_type_ids 1): encode the pair (document, query)")
        start = int(query.nonzero()[0])
        if not bool(query[start:].all()):
            raise ValueError(f"row {r}: the query (token_type_ids 1) must end the row, after the document: encode the "
                             "pair as (document, query), document first")
        return query_last(self.model, ids, start)
