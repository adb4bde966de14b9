"""Does transformers 4.50's ``Trainer`` sum micro-batch losses for a model whose ``forward`` takes ``**kwargs``?

The authors' release pins transformers 4.50 and its heads' ``forward(self, input_ids, labels=None, **kwargs)`` take
``**kwargs``; EncodEval fine-tunes them with the ``Trainer``. This probe trains two copies of one CPU toy model
(same weights, same data, same seed), one whose ``forward`` takes ``**kwargs`` and one whose does not, each at
``gradient_accumulation_steps=1`` (batch 8) and ``=2`` (batch 4 x 2), and prints the ``grad_norm`` the Trainer
logs at every step. Each model returns the mean loss of its micro-batch, as the release's heads do (they ignore
the ``num_items_in_batch`` the Trainer passes).

Run with transformers 4.50 (not the library's venv):

    python3.11 -m venv /work/venv450
    /work/venv450/bin/pip install torch==2.13.0 "transformers==4.50.*" accelerate
    /work/venv450/bin/python benchmarks/paper_protocol_cpu/accumulation_450.py

The recorded output is ``accumulation_450.txt`` beside this file.
"""

from __future__ import annotations

import inspect
import tempfile

import torch
import transformers
from torch import nn
from transformers import Trainer, TrainingArguments


class WithoutKwargs(nn.Module):
    """A linear classifier whose loss is its micro-batch's mean (``CrossEntropyLoss()``, as the release's heads)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.linear = nn.Linear(16, 3)

    def forward(self, x, labels=None):
        logits = self.linear(x)
        return {"loss": nn.functional.cross_entropy(logits, labels), "logits": logits}


class WithKwargs(WithoutKwargs):
    """The same model; its ``forward`` takes ``**kwargs`` like the release's heads."""

    def forward(self, x, labels=None, **kwargs):
        return super().forward(x, labels)


def dataset(n: int = 64) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 16, generator=g)
    y = torch.randint(0, 3, (n,), generator=g)
    return [{"x": x[i], "labels": y[i]} for i in range(n)]


def grad_norms(model_cls, accumulation: int) -> list[float]:
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(
            output_dir=out, per_device_train_batch_size=8 // accumulation, gradient_accumulation_steps=accumulation,
            learning_rate=1e-3, max_steps=4, logging_steps=1, max_grad_norm=1.0, seed=0, use_cpu=True,
            report_to=[], remove_unused_columns=False, save_strategy="no", lr_scheduler_type="constant",
            disable_tqdm=True)
        trainer = Trainer(model=model_cls(), args=args, train_dataset=dataset())
        trainer.train()
        print(f"  {model_cls.__name__:14s} accumulation {accumulation}: model_accepts_loss_kwargs="
              f"{trainer.model_accepts_loss_kwargs}")
        return [h["grad_norm"] for h in trainer.state.log_history if "grad_norm" in h]


def main() -> None:
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    print("Trainer.training_step divides the loss by the accumulation steps only "
          f"'if not self.model_accepts_loss_kwargs': "
          f"{'not self.model_accepts_loss_kwargs' in inspect.getsource(Trainer.training_step)}")
    rows = {}
    for cls in (WithoutKwargs, WithKwargs):
        for acc in (1, 2):
            rows[cls.__name__, acc] = grad_norms(cls, acc)
    print("grad_norm per step (4 optimizer steps of 8 examples, the same examples in the same order):")
    for (name, acc), norms in rows.items():
        print(f"  {name:14s} accumulation {acc}: " + ", ".join(f"{v:.6f}" for v in norms))
    for name in ("WithoutKwargs", "WithKwargs"):
        ratio = rows[name, 2][0] / rows[name, 1][0]
        print(f"{name}: first-step grad_norm at accumulation 2 / at accumulation 1 = {ratio:.4f}")


if __name__ == "__main__":
    main()
