"""``avey-b finetune --task multi-vector``: a late-interaction (ColBERT) model from the rows ``--task embedding``
takes — (anchor, positive[, negative]) — trained by sentence-transformers' multi-vector trainer, scored on held-out
rows before and after.

    avey-b finetune --task multi-vector --model runs/quickstart/model --train-file pairs.jsonl --output-dir runs/mv

The model: the backbone, a linear projection of each token's last hidden state to ``--multivector-dim`` (128 by
default; a multi-vector directory keeps its own) and a per-token normalization — sentence-transformers'
``MultiVectorEncoder``, the ecosystem's standard for ColBERT models (:mod:`avey_b.model.multivector` says why);
every real token, special tokens included, has a vector, and queries and documents are encoded alike.

Data, columns and held-out rows: as ``--task embedding`` (:mod:`avey_b.finetuning.embedding`). Training:
``MultiVectorEncoderTrainer`` with its late-interaction MultipleNegativesRankingLoss (``--loss mnrl``: each anchor's
MaxSim against its positive and every other row's positive and negative in the batch, cross-entropy) or its
GradCache form (``--loss cached-mnrl``, ``--mini-batch-size`` rows per pass). Inputs are never cut for Avey-B.

Scoring: the held-out rows as a retrieval task scored by MaxSim (``MultiVectorInformationRetrievalEvaluator``):
recall@1, recall@10, NDCG@10 and MRR@10, in percent, before training and after.

Output: for Avey-B, ``--output-dir`` is an :class:`avey_b.AveyBForMultiVector` directory, which
``MultiVectorEncoder(dir)`` loads with the same vectors as the ``Encoder``'s ``multivector`` kind (``avey-b serve``'s
``/embed_all`` and ``/maxsim``, ``avey-b embed --outputs multivector``); another encoder's is the
``MultiVectorEncoder``'s own save. With ``results.json``.
"""

from __future__ import annotations

from typing import Any

from . import common
from .embedding import evaluator, saved_model_type, train_pairs
from .options import OwnDataOptions

#: The retrieval scores recorded, sentence-transformers' key (MaxSim) -> ours.
METRICS = {"maxsim_recall@1": "recall@1", "maxsim_recall@10": "recall@10", "maxsim_ndcg@10": "ndcg@10",
           "maxsim_mrr@10": "mrr@10"}


def load_model(options: OwnDataOptions, device: str):
    """The ``MultiVectorEncoder`` to train: a multi-vector directory as it is; any other encoder as its backbone, a
    fresh projection to ``--multivector-dim`` (seeded by ``--seed``), sentence-transformers' scoring mask (every
    real token) and a per-token normalization."""
    import torch
    from sentence_transformers import MultiVectorEncoder
    from sentence_transformers.base.modules import Normalize, Transformer
    from sentence_transformers.base.modules.dense import Dense
    from sentence_transformers.multi_vector_encoder.modules import MultiVectorMask

    if saved_model_type(options.model) == "MultiVectorEncoder":
        model = MultiVectorEncoder(options.model, device=device)
    else:
        transformer = Transformer(options.model)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(options.seed)
            projection = Dense(transformer.get_embedding_dimension(), options.multivector_dim, bias=False,
                               activation_function=torch.nn.Identity(), module_input_name="token_embeddings")
        modules = [transformer, projection, MultiVectorMask(), Normalize(module_input_name="token_embeddings")]
        model = MultiVectorEncoder(modules=modules, device=device)
    if options.tokenizer:
        model[0].processor = common.tokenizer_for(options)
    return model


def avey_b_head(model):
    """The trained ``MultiVectorEncoder`` as an :class:`avey_b.AveyBForMultiVector` (the same backbone and projection
    weights) when its backbone is Avey-B, else None. Saving through the head writes the directory by the library's
    one saving rule (:func:`avey_b.model.loading.sentence_transformers_files`)."""
    from avey_b.model.auto import AveyBForMultiVector, AveyBModel

    backbone = model[0].auto_model
    if not isinstance(backbone, AveyBModel):
        return None
    weight = model[1].linear.weight
    backbone.config.multivector_dim = weight.shape[0]
    head = AveyBForMultiVector(backbone.config)
    head.model = backbone
    head.projection.weight.data.copy_(weight.data)
    return head.to(weight.device)


def train(options: OwnDataOptions) -> dict[str, Any]:
    """Train and score a multi-vector model as the module docstring says; returns the results record (also
    ``results.json`` in ``options.output_dir``, with the model)."""
    from sentence_transformers import MultiVectorEncoderTrainer, MultiVectorEncoderTrainingArguments
    from sentence_transformers.multi_vector_encoder import losses
    from sentence_transformers.multi_vector_encoder.evaluation import MultiVectorInformationRetrievalEvaluator

    def loss_of(model):
        if options.loss_name() == "cached-mnrl":
            return losses.CachedMultiVectorMultipleNegativesRankingLoss(model, mini_batch_size=options.mini_batch_size)
        return losses.MultiVectorMultipleNegativesRankingLoss(model)

    def evaluate_on(held, columns):
        return evaluator(held, columns, options.batch_size, MultiVectorInformationRetrievalEvaluator)

    model, record = train_pairs(options, load_model, evaluate_on, loss_of,
                                (MultiVectorEncoderTrainer, MultiVectorEncoderTrainingArguments), METRICS)
    record = {"loss": options.loss_name(), **record, "multivector_dim": model[1].linear.out_features}
    head = avey_b_head(model)
    if head is None:
        return common.finish_sentence_transformers(options, model, record)
    return common.finish(options, head, model.tokenizer, record)
