"""``avey-b finetune --task sparse-embedding``: a learned sparse (SPLADE) model from your (anchor, positive[,
negative]) rows, trained by sentence-transformers' sparse trainer, scored on held-out rows before and after.

    avey-b finetune --task sparse-embedding --model runs/quickstart/model --train-file pairs.jsonl --output-dir runs/sp

Data: as ``--task embedding`` takes it (:mod:`avey_b.finetuning.embedding`: the same columns, formats and checks).

The model: a masked-LM checkpoint's head gives each text a vocabulary-sized vector of SPLADE weights, ``w_j =
max_t log(1 + relu(logit_{t,j}))`` over its real tokens. For Avey-B that is the head's own ``splade`` method (the max
taken chunk by chunk: :mod:`avey_b.model.sparse`), the same vectors ``Encoder.sparse``, ``serve``'s
``/embed_sparse`` and ``embed --outputs sparse`` give; another masked-LM (BERT, ModernBERT, ...) is
sentence-transformers' own ``Transformer`` (fill-mask) and ``SpladePooling`` (max). A checkpoint without a
masked-LM head is an error naming it. Inputs are never cut for Avey-B (:func:`avey_b.finetuning.common.length_rule`).

Training: ``SparseEncoderTrainer`` with ``SpladeLoss``: ``SparseMultipleNegativesRankingLoss`` (each anchor against
its positive and every other row's positive and negative in the batch, by dot product; batches never hold the same
text twice) plus the FLOPS regularizer (Paria et al., 2020, as SPLADE uses it) on the queries' and the documents'
vectors, weighted ``--query-regularizer-weight`` (default 5e-3) and ``--document-regularizer-weight`` (3e-3), and
ramped up from 0 over the first third of the steps (sentence-transformers'
``SpladeRegularizerWeightSchedulerCallback``).
Larger weights give sparser vectors (fewer active dimensions) at some cost in quality. The defaults of this task
differ from the others' (:mod:`avey_b.finetuning.options`): the weights are 100 times sentence-transformers'
documented ones (made for hundreds of thousands of steps), the learning rate is 2e-3 up to width 256 (falling to
BERT's 5e-5 at width 768) and the epochs 10: on the quickstart model and a few hundred rows, SPLADE learned and
sparsified only so (``benchmarks/finetune_defaults/sparse.md``: at the general defaults its documents kept about
half of the vocabulary active and scored below the untrained model).

Scoring: the held-out rows as the same retrieval task as ``--task embedding`` (``embedding.retrieval_task``), by
dot product (sentence-transformers' ``SparseInformationRetrievalEvaluator``): recall@1, recall@10, NDCG@10 and
MRR@10 in percent, before training (the baseline) and after, and the vectors' active dimensions (the mean count of
non-zero weights per query and per document) before and after, in ``results.json``'s ``active_dims``.

Output: ``--output-dir`` is a SPLADE directory (the config's ``embedding_kind`` is ``"sparse"``:
:func:`avey_b.model.loading.sentence_transformers_files`) that ``SparseEncoder(dir)`` loads as what it is, and
``Encoder``, ``avey-b serve`` and ``avey-b embed --outputs sparse`` give the same vectors of.
"""

from __future__ import annotations

from typing import Any

from . import common
from .embedding import EVALUATOR_SETTINGS, retrieval_task, saved_model_type, train_pairs
from .options import OwnDataOptions

#: The retrieval scores recorded, sentence-transformers' key (dot product) -> ours.
METRICS = {"dot_recall@1": "recall@1", "dot_recall@10": "recall@10", "dot_ndcg@10": "ndcg@10",
           "dot_mrr@10": "mrr@10"}


def load_model(options: OwnDataOptions, device: str):
    """The ``SparseEncoder`` to train (the module docstring says which modules); a checkpoint whose architecture
    is not a masked-LM is a ``ValueError`` naming what it is and what to start from instead."""
    from sentence_transformers import SparseEncoder
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sparse_encoder.modules import SpladePooling
    from transformers import AutoConfig

    from avey_b.model.configuration import is_avey_b
    from avey_b.model.loading import SPLADE_MODALITY

    if saved_model_type(options.model) == "SparseEncoder":
        model = SparseEncoder(options.model, device=device)
    else:
        config = AutoConfig.from_pretrained(options.model)
        architecture = (config.architectures or [type(config).__name__])[0]
        if not architecture.endswith("ForMaskedLM"):
            raise ValueError(f"{options.model} is a {architecture}, which has no masked-LM head: sparse (SPLADE) "
                             "vectors are the masked-LM head's. Start from a pretrained checkpoint (for Avey-B, "
                             "what `avey-b pretrain` saves, an AveyBForMaskedLM)")
        if is_avey_b(config):
            modules = [Transformer(options.model, transformer_task="fill-mask", modality_config=SPLADE_MODALITY,
                                   module_output_name="sentence_embedding")]
        else:
            modules = [Transformer(options.model, transformer_task="fill-mask"), SpladePooling("max")]
        model = SparseEncoder(modules=modules, device=device, similarity_fn_name="dot")
    if is_avey_b(model[0].auto_model.config):
        model[0].auto_model.config.embedding_kind = "sparse"  # saved as a SPLADE directory
    if options.tokenizer:
        model[0].processor = common.tokenizer_for(options)
    return model


class Evaluator:
    """Sentence-transformers' ``SparseInformationRetrievalEvaluator`` over :func:`embedding.retrieval_task`, each
    call's active dimensions kept (``active_dims``: one ``{"query": q, "document": d}`` per call)."""

    def __init__(self, held, columns: dict[str, str], batch_size: int):
        from sentence_transformers.sparse_encoder.evaluation import SparseInformationRetrievalEvaluator

        self.queries, self.corpus, relevant = retrieval_task(held, columns)
        self.evaluate = SparseInformationRetrievalEvaluator(self.queries, self.corpus, relevant,
                                                            batch_size=batch_size, **EVALUATOR_SETTINGS)
        self.active_dims: list[dict[str, float]] = []

    def __call__(self, model) -> dict[str, float]:
        scores = self.evaluate(model)
        stats = self.evaluate.sparsity_stats
        self.active_dims.append({"query": round(stats["query_active_dims"], 1),
                                 "document": round(stats["corpus_active_dims"], 1)})
        return scores


def train(options: OwnDataOptions) -> dict[str, Any]:
    """Train and score a sparse model as the module docstring says; returns the results record (also
    ``results.json`` in ``options.output_dir``, with the model)."""
    from sentence_transformers.sparse_encoder import SparseEncoderTrainer, SparseEncoderTrainingArguments
    from sentence_transformers.sparse_encoder.losses import SparseMultipleNegativesRankingLoss, SpladeLoss

    weights = {"query_regularizer_weight": options.query_regularizer_weight,
               "document_regularizer_weight": options.document_regularizer_weight}
    evaluators = []

    def evaluate_on(held, columns):
        evaluators.append(Evaluator(held, columns, options.batch_size))
        return evaluators[-1]

    model, record = train_pairs(options, load_model, evaluate_on,
                                lambda model: SpladeLoss(model, SparseMultipleNegativesRankingLoss(model), **weights),
                                (SparseEncoderTrainer, SparseEncoderTrainingArguments), METRICS)
    active = evaluators[0].active_dims
    record = {"loss": "splade(sparse-mnrl + flops)", **weights, **record,
              "active_dims": {"before": active[0], "after": active[-1]},
              "dimensions": model[0].auto_model.config.vocab_size}  # a SPLADE vector: one weight per vocabulary id
    return common.finish_sentence_transformers(options, model, record)
