"""Task heads on one shared backbone (``self.model = AveyBModel(config)``), like transformers' ModernBERT.

Every head takes an explicit ``attention_mask`` and uses it in its pooling and loss, returns the standard
transformers output class (``loss`` when labels are given), and honours ``return_dict=False``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers.modeling_outputs import (
    MaskedLMOutput,
    ModelOutput,
    MultipleChoiceModelOutput,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)

from .configuration import AveyBConfig
from .modeling import AveyBModel, AveyBPreTrainedModel
from .sparse import SparseEmbeddingOutput, splade_max


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """Masked mean over the sequence: (B, N, d) -> (B, d); padding never contributes. Sums and counts accumulate in
    at least float32: a float16 sum of 100K tokens overflows (65,504), and bfloat16 cannot count past 256 exactly."""
    acc = torch.promote_types(hidden.dtype, torch.float32)
    if attention_mask is None:
        return hidden.mean(1, dtype=acc).to(hidden.dtype)
    total = (hidden * attention_mask.to(hidden.dtype).unsqueeze(-1)).sum(1, dtype=acc)
    return (total / attention_mask.sum(1, keepdim=True).clamp_min(1).to(acc)).to(hidden.dtype)


def sentence_embedding(hidden: torch.Tensor, attention_mask: torch.Tensor | None, normalize: bool) -> torch.Tensor:
    """The embedding head's vectors from the backbone's last hidden state: masked mean pooling, then (``normalize``)
    L2 normalization computed in float32. Also what ``avey-b serve`` returns for any Avey-B checkpoint."""
    return _l2_normalize(mean_pool(hidden, attention_mask), normalize)


def _l2_normalize(pooled: torch.Tensor, normalize: bool) -> torch.Tensor:
    return F.normalize(pooled.float(), dim=-1).to(pooled.dtype) if normalize else pooled


def chunk_embeddings(hidden: torch.Tensor, attention_mask: torch.Tensor | None,
                     chunks: Sequence[Sequence[tuple[int, int]]], normalize: bool) -> list[torch.Tensor]:
    """Late chunking: one vector per chunk of each row, pooled from the hidden states of one forward over the whole
    row, so every chunk vector has seen the whole document (Günther et al., 2024, "Late Chunking").

    ``chunks[b]`` lists row ``b``'s chunks as token ranges ``(start, end)``, end exclusive, counted over the row's
    real tokens (the positions ``attention_mask`` marks, in order), so the same ranges hold whichever side the row
    is padded on. Each chunk's vector is the mean of its tokens' states (what :func:`mean_pool` computes with a
    mask that marks the chunk; sums in at least float32), then, with ``normalize``, L2-normalized as
    :func:`sentence_embedding` does. Returns one ``(len(chunks[b]), d)`` tensor per row."""
    if len(chunks) != hidden.shape[0]:
        raise ValueError(f"chunks has {len(chunks)} rows for a batch of {hidden.shape[0]}")
    real = (torch.ones(hidden.shape[:2], dtype=torch.bool, device=hidden.device) if attention_mask is None
            else attention_mask.bool())
    position = real.long().cumsum(1) - 1  # (B, N) each token's index among its row's real tokens
    acc = torch.promote_types(hidden.dtype, torch.float32)
    out = []
    for b, spans in enumerate(chunks):
        n_real = int(real[b].sum())
        span = torch.as_tensor(list(spans), dtype=torch.long, device=hidden.device).reshape(-1, 2)  # (C, 2)
        bad = ((span[:, 0] < 0) | (span[:, 1] > n_real) | (span[:, 0] >= span[:, 1])).nonzero()
        if len(bad):
            raise ValueError(f"row {b}: chunk {tuple(span[bad[0, 0]].tolist())} is not a non-empty token range "
                             f"within the row's {n_real} tokens")
        inside = (position[b] >= span[:, :1]) & (position[b] < span[:, 1:]) & real[b]  # (C, N)
        total = inside.to(acc) @ hidden[b].to(acc)  # (C, d)
        pooled = (total / (span[:, 1] - span[:, 0]).unsqueeze(-1).to(acc)).to(hidden.dtype)
        out.append(_l2_normalize(pooled, normalize))
    return out


def _finish(output, return_dict: bool | None, config: AveyBConfig):
    return_dict = config.return_dict if return_dict is None else return_dict
    return output if return_dict else output.to_tuple()


class AveyBForMaskedLM(AveyBPreTrainedModel):
    """Masked-LM head: logits = ``h · Eᵀ`` with the decoder tied to the input embeddings.

    With ``config.sparse_prediction`` and labels, logits are computed only where ``labels != -100``
    (shape ``(n_labelled, V)``); the loss is the same as the dense computation.
    """

    _tied_weights_keys = {"decoder.weight": "model.embed_tokens.weight"}

    def __init__(self, config: AveyBConfig):
        super().__init__(config)
        self.model = AveyBModel(config)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size, bias=config.decoder_bias)
        self.post_init()

    def get_output_embeddings(self) -> nn.Linear:
        return self.decoder

    def set_output_embeddings(self, new_embeddings: nn.Linear) -> None:
        self.decoder = new_embeddings

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        **kwargs,
    ) -> MaskedLMOutput | tuple:
        out = self.model(input_ids, attention_mask, inputs_embeds, output_hidden_states, return_dict=True)
        h = out.last_hidden_state
        if labels is not None and self.config.sparse_prediction:
            labels = labels.reshape(-1)
            selected = labels != -100
            h, labels = h.reshape(-1, h.shape[-1])[selected], labels[selected]
        logits = self.decoder(h)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)
        output = MaskedLMOutput(loss=loss, logits=logits, hidden_states=out.hidden_states)
        return _finish(output, return_dict, self.config)

    def splade(self, input_ids: torch.LongTensor | None = None, attention_mask: torch.Tensor | None = None,
               inputs_embeds: torch.Tensor | None = None) -> SparseEmbeddingOutput:
        """SPLADE's sparse vectors of a padded batch, ``(B, V)`` in ``sparse_embedding``: one backbone forward,
        then the max over real tokens taken chunk by chunk through this head's decoder, so the ``(N, V)`` logits
        of a long input never exist at once (:func:`avey_b.model.sparse.splade_max`, which cites the formula).
        What ``avey-b serve``'s ``/embed_sparse``, ``avey-b embed --outputs sparse`` and sentence-transformers'
        ``SparseEncoder`` (a sparse directory names this method) compute."""
        hidden = self.model(input_ids, attention_mask, inputs_embeds, return_dict=True).last_hidden_state
        return SparseEmbeddingOutput(sparse_embedding=splade_max(hidden, attention_mask, self.decoder))


class _ReleaseSequenceHead(nn.Sequential):
    """The release's sequence-classification MLP: d -> 2d -> 2d -> d with GELUs."""

    def __init__(self, d: int):
        super().__init__(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))


def _classification_loss(config: AveyBConfig, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Regression (MSE), single-label (cross-entropy) or multi-label (BCE), inferred as transformers does."""
    if config.problem_type is None:
        if config.num_labels == 1:
            config.problem_type = "regression"
        elif labels.dtype in (torch.long, torch.int):
            config.problem_type = "single_label_classification"
        else:
            config.problem_type = "multi_label_classification"
    logits = logits.float()
    if config.problem_type == "regression":
        if config.num_labels == 1:
            return F.mse_loss(logits.squeeze(-1), labels.float().reshape(-1))
        return F.mse_loss(logits, labels.float())
    if config.problem_type == "single_label_classification":
        return F.cross_entropy(logits.reshape(-1, config.num_labels), labels.reshape(-1))
    return F.binary_cross_entropy_with_logits(logits, labels.float())


class AveyBForSequenceClassification(AveyBPreTrainedModel):
    """Masked mean pooling (``padding="release"``: the mean over every position) -> (release MLP) -> dropout ->
    linear classifier."""

    def __init__(self, config: AveyBConfig):
        super().__init__(config)
        if (config.architectures or [None])[0] == "AveyBForQueryLastScoring":
            raise ValueError("this checkpoint is an AveyBForQueryLastScoring, which scores the query's tokens after "
                             "a document, not every token: load it with avey_b.AveyBForQueryLastScoring")
        self.num_labels = config.num_labels
        self.model = AveyBModel(config)
        self.dense = _ReleaseSequenceHead(config.hidden_size) if config.classifier_head == "avey-b1" else None
        self.dropout = nn.Dropout(config.classifier_dropout)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        **kwargs,
    ) -> SequenceClassifierOutput | tuple:
        out = self.model(input_ids, attention_mask, inputs_embeds, output_hidden_states, return_dict=True)
        # the release's head averages over every position, batch padding included (AveyBConfig.padding)
        pooled = mean_pool(out.last_hidden_state, None if self.config.padding == "release" else attention_mask)
        if self.dense is not None:
            pooled = self.dense(pooled)
        logits = self.classifier(self.dropout(pooled))
        loss = None if labels is None else _classification_loss(self.config, logits, labels)
        output = SequenceClassifierOutput(loss=loss, logits=logits, hidden_states=out.hidden_states)
        return _finish(output, return_dict, self.config)


class AveyBForTokenClassification(AveyBPreTrainedModel):
    """Per-token classifier (NER); padded positions and label -100 are left out of the loss."""

    def __init__(self, config: AveyBConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.model = AveyBModel(config)
        d = config.hidden_size
        # The release's token head is Linear(d, d) -> tanh before the classifier.
        self.dense = nn.Sequential(nn.Linear(d, d), nn.Tanh()) if config.classifier_head == "avey-b1" else None
        self.dropout = nn.Dropout(config.classifier_dropout)
        self.classifier = nn.Linear(d, config.num_labels)
        self.post_init()

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        **kwargs,
    ) -> TokenClassifierOutput | tuple:
        out = self.model(input_ids, attention_mask, inputs_embeds, output_hidden_states, return_dict=True)
        h = out.last_hidden_state
        if self.dense is not None:
            h = self.dense(h)
        logits = self.classifier(self.dropout(h))
        loss = None
        if labels is not None:
            if attention_mask is not None:
                labels = labels.masked_fill(attention_mask == 0, -100)
            loss = F.cross_entropy(logits.float().reshape(-1, self.num_labels), labels.reshape(-1), ignore_index=-100)
        output = TokenClassifierOutput(loss=loss, logits=logits, hidden_states=out.hidden_states)
        return _finish(output, return_dict, self.config)


class AveyBForQuestionAnswering(AveyBPreTrainedModel):
    """Extractive QA: start/end span logits per token; padded positions can never be predicted."""

    def __init__(self, config: AveyBConfig):
        super().__init__(config)
        self.model = AveyBModel(config)
        self.dropout = nn.Dropout(config.classifier_dropout)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        self.post_init()

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        start_positions: torch.LongTensor | None = None,
        end_positions: torch.LongTensor | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        **kwargs,
    ) -> QuestionAnsweringModelOutput | tuple:
        out = self.model(input_ids, attention_mask, inputs_embeds, output_hidden_states, return_dict=True)
        logits = self.qa_outputs(self.dropout(out.last_hidden_state)).float()  # (B, N, 2)
        if attention_mask is not None:
            logits = logits.masked_fill((attention_mask == 0).unsqueeze(-1), torch.finfo(logits.dtype).min)
        start_logits, end_logits = logits.unbind(-1)
        loss = None
        if start_positions is not None and end_positions is not None:
            # Positions outside the sequence (e.g. answers cut off by truncation) are ignored, as in transformers.
            ignored = start_logits.shape[1]
            start = start_positions.reshape(-1).clamp(0, ignored)
            end = end_positions.reshape(-1).clamp(0, ignored)
            loss = (F.cross_entropy(start_logits, start, ignore_index=ignored)
                    + F.cross_entropy(end_logits, end, ignore_index=ignored)) / 2
        output = QuestionAnsweringModelOutput(
            loss=loss, start_logits=start_logits, end_logits=end_logits, hidden_states=out.hidden_states
        )
        return _finish(output, return_dict, self.config)


class AveyBForMultipleChoice(AveyBPreTrainedModel):
    """Scores ``C`` choices per example: inputs (B, C, N) -> masked mean pooling -> one logit per choice."""

    def __init__(self, config: AveyBConfig):
        super().__init__(config)
        self.model = AveyBModel(config)
        self.dropout = nn.Dropout(config.classifier_dropout)
        self.classifier = nn.Linear(config.hidden_size, 1)
        self.post_init()

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        **kwargs,
    ) -> MultipleChoiceModelOutput | tuple:
        source = input_ids if input_ids is not None else inputs_embeds
        if source is None or source.dim() < 3:
            raise ValueError("multiple choice expects input_ids of shape (batch, num_choices, length)")
        num_choices = source.shape[1]
        flat = lambda t: None if t is None else t.reshape(-1, *t.shape[2:])  # (B, C, ...) -> (B·C, ...)
        out = self.model(flat(input_ids), flat(attention_mask), flat(inputs_embeds), output_hidden_states,
                         return_dict=True)
        pooled = mean_pool(out.last_hidden_state, flat(attention_mask))
        logits = self.classifier(self.dropout(pooled)).reshape(-1, num_choices)
        loss = None if labels is None else F.cross_entropy(logits.float(), labels.reshape(-1))
        output = MultipleChoiceModelOutput(loss=loss, logits=logits, hidden_states=out.hidden_states)
        return _finish(output, return_dict, self.config)


@dataclass
class SentenceEmbeddingOutput(ModelOutput):
    """``BaseModelOutputWithPooling``'s fields after the contrastive ``loss`` of :func:`in_batch_contrastive_loss`
    (first, as in every transformers output with a loss)."""

    loss: torch.FloatTensor | None = None
    last_hidden_state: torch.FloatTensor | None = None
    pooler_output: torch.FloatTensor | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None
    attentions: tuple[torch.FloatTensor, ...] | None = None


def in_batch_contrastive_loss(embeddings: torch.Tensor, labels: torch.Tensor, scale: float = 20.0) -> torch.Tensor:
    """In-batch contrastive loss over cosine similarities: every other input with the same label is a positive,
    every input with another label a negative (InfoNCE with several positives, as supervised contrastive
    learning). For ``(anchor, positive)`` pairs, give both the same label: unlike sentence-transformers'
    MultipleNegativesRankingLoss (queries against documents only; the retrieval tasks use that one,
    ``evaluation.tasks.ir.multiple_negatives_ranking_loss``), every other input of the batch is a candidate,
    anchors included, in both directions. Inputs without a positive in the batch add nothing."""
    e = F.normalize(embeddings.float(), dim=-1)
    return contrastive_loss_of_scores(scale * e @ e.T, labels)


def contrastive_loss_of_scores(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The loss of :func:`in_batch_contrastive_loss` over given (B, B) logits: ``scores[i, j]`` is how well input
    ``j`` answers input ``i`` (the diagonal is ignored); every ``j != i`` sharing ``i``'s label is a positive of
    ``i``, every other ``j`` a negative. Returns the mean over the inputs that have a positive (a zero that keeps
    the graph when none has)."""
    if labels.shape != scores.shape[:1]:
        raise ValueError(f"labels must have shape (batch,) = {tuple(scores.shape[:1])}, got {tuple(labels.shape)}")
    self_mask = torch.eye(len(scores), dtype=torch.bool, device=scores.device)
    logits = scores.float().masked_fill(self_mask, float("-inf"))
    positive = (labels[:, None] == labels[None, :]) & ~self_mask
    has_positive = positive.any(1)
    log_prob = logits - torch.logsumexp(logits, dim=1, keepdim=True)
    per_anchor = -(log_prob.masked_fill(~positive, 0.0).sum(1)) / positive.sum(1).clamp_min(1)
    if not has_positive.any():
        return logits.masked_fill(self_mask, 0.0).sum() * 0.0  # no pair: zero, but on the graph
    return per_anchor[has_positive].mean()


class AveyBForSentenceEmbedding(AveyBPreTrainedModel):
    """Sentence embeddings for retrieval: masked mean pooling, L2-normalized if ``config.normalize_embeddings``.

    ``pooler_output`` holds the (B, d) embeddings; no parameters beyond the backbone, so any Avey-B checkpoint
    (e.g. a masked-LM one) loads into it. With ``labels`` (B,), ``loss`` is :func:`in_batch_contrastive_loss`
    (inputs sharing a label are pulled together, the others pushed apart; scale ``config.contrastive_scale``).

    Its saved directory (like every Avey-B directory but a reranker's) is also a sentence-transformers one:
    ``SentenceTransformer(directory)`` returns exactly ``pooler_output``, with no length limit
    (:func:`avey_b.model.loading.sentence_transformers_files`).
    """

    def __init__(self, config: AveyBConfig):
        super().__init__(config)
        self.model = AveyBModel(config)
        self.post_init()

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        **kwargs,
    ) -> SentenceEmbeddingOutput | tuple:
        out = self.model(input_ids, attention_mask, inputs_embeds, output_hidden_states, return_dict=True)
        pooled = sentence_embedding(out.last_hidden_state, attention_mask, self.config.normalize_embeddings)
        loss = None if labels is None else in_batch_contrastive_loss(pooled, labels, self.config.contrastive_scale)
        output = SentenceEmbeddingOutput(
            loss=loss, last_hidden_state=out.last_hidden_state, pooler_output=pooled, hidden_states=out.hidden_states
        )
        return _finish(output, return_dict, self.config)

    def encode_chunks(self, input_ids: torch.LongTensor, attention_mask: torch.Tensor | None,
                      chunks: Sequence[Sequence[tuple[int, int]]]) -> list[torch.Tensor]:
        """Late chunking: one forward over each whole input, then one embedding per chunk (:func:`chunk_embeddings`:
        the mean of the chunk's token states, L2-normalized if ``config.normalize_embeddings``, as ``forward``
        pools the whole input). ``chunks[b]`` holds row ``b``'s ``(start, end)`` token ranges, counted over its
        real tokens (padding on either side is skipped). Returns one ``(len(chunks[b]), d)`` tensor per row.
        Call it under ``torch.no_grad()`` for inference; ``avey-b embed --chunking late`` runs it over a corpus
        and maps character spans to token ranges with the tokenizer's offsets.

            enc = tokenizer(text, return_tensors="pt")
            with torch.no_grad():
                vectors = model.encode_chunks(enc.input_ids, enc.attention_mask, [[(1, 65), (65, 129)]])[0]
        """
        hidden = self.model(input_ids, attention_mask, return_dict=True).last_hidden_state
        return chunk_embeddings(hidden, attention_mask, chunks, self.config.normalize_embeddings)
