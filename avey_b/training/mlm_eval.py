"""The masked-LM objective's sums (the loss of a step and of an evaluation), held-out evaluation and the fill-mask
report of a pretraining run."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from avey_b.data.tokenization import special_ids

from ..data.mlm import IGNORE_INDEX, mask_tokens, sequence_generator
from . import distributed as dist_utils
from .config import PretrainConfig

EVAL_SEED_OFFSET = 7_777_777  # held-out masks differ from training masks but are the same at every evaluation


def uses_sparse_logits(model) -> bool:
    return bool(getattr(dist_utils.unwrap(model).config, "sparse_prediction", False))


def mlm_sums(model, batch: dict, autocast) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(sum of token cross-entropies, number of masked tokens, number predicted correctly) for one batch."""
    labels = batch["labels"]
    sparse = uses_sparse_logits(model)
    with autocast:
        out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                    labels=labels if sparse else None)
    logits = out.logits
    target = labels[labels != IGNORE_INDEX]
    if logits.dim() == 3:  # dense: (B, N, V) -> the labelled rows
        logits = logits[labels != IGNORE_INDEX]
    logits = logits.float()
    loss_sum = F.cross_entropy(logits, target, reduction="sum")
    correct = (logits.argmax(-1) == target).sum()
    return loss_sum, torch.tensor(target.numel(), device=logits.device), correct


def masked_batch(samples: list[dict], tokenizer, cfg: PretrainConfig, device, seed: int) -> dict:
    """Stack packed sequences and mask each with the generator keyed by its global index."""
    ids, att, labels = [], [], []
    specials = special_ids(tokenizer)
    for s in samples:
        inp, lab = mask_tokens(s["input_ids"], cfg.data.mask_rate, tokenizer.mask_token_id, specials,
                               sequence_generator(seed, s["index"]), scheme=cfg.data.mask_scheme,
                               vocab_size=len(tokenizer), attention_mask=s["attention_mask"])
        ids.append(inp)
        att.append(s["attention_mask"])
        labels.append(lab)
    return {"input_ids": torch.stack(ids).to(device), "attention_mask": torch.stack(att).to(device),
            "labels": torch.stack(labels).to(device)}


@torch.no_grad()
def evaluate(model, make_stream, tokenizer, cfg, info, autocast) -> dict:
    """Held-out masked-LM loss (per masked token) and accuracy, summed over all ranks."""
    was_training = model.training
    model.eval()
    totals = torch.zeros(3, dtype=torch.float64, device=info.device)
    batch: list[dict] = []
    mb = cfg.train.micro_batch_size

    def run(samples):
        b = masked_batch(samples, tokenizer, cfg, info.device, cfg.train.seed + EVAL_SEED_OFFSET)
        if (b["labels"] != IGNORE_INDEX).any():
            loss, n, correct = mlm_sums(model, b, autocast)
            totals.add_(torch.stack([loss.double(), n.double(), correct.double()]))
        elif dist_utils.uses_fsdp(info, cfg.distributed.strategy):  # keep FSDP collectives in step
            model(input_ids=b["input_ids"], attention_mask=b["attention_mask"])

    for sample in make_stream():
        batch.append(sample)
        if len(batch) == mb:
            run(batch)
            batch = []
    if batch:
        run(batch)
    dist_utils.all_reduce_sum(totals, info)
    model.train(was_training)
    loss, n, correct = totals.tolist()
    if n == 0:
        raise ValueError("the held-out split has no masked tokens: make data.eval_fraction / eval.max_sequences larger")
    return {"eval_loss": loss / n, "eval_accuracy": correct / n, "eval_tokens": int(n)}


@torch.no_grad()
def fill_mask(model, tokenizer, sentences: list[str], device, top_k: int = 5) -> list[tuple[str, list[str]]]:
    """Top predictions for every [MASK] of each sentence (the mask token may be written as ``[MASK]``)."""
    model = dist_utils.unwrap(model)
    was_training = model.training
    model.eval()
    results = []
    for text in sentences:
        text = text.replace("[MASK]", tokenizer.mask_token)
        enc = tokenizer(text, return_tensors="pt").to(device)
        logits = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).logits[0]
        pos = (enc["input_ids"][0] == tokenizer.mask_token_id).nonzero().flatten()
        preds = []
        for p in pos.tolist():
            top = logits[p, : len(tokenizer)].float().topk(top_k).indices.tolist()
            preds.append("|".join(tokenizer.decode([t]).strip() or repr(tokenizer.decode([t])) for t in top))
        results.append((text, preds))
    model.train(was_training)
    return results
