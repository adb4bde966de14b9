"""Watching a pretraining run (the task scores of fine-tuning are :mod:`avey_b.evaluation.metrics`): metrics sinks
for a run (rank 0 only): ``metrics.jsonl`` (every record), ``metrics.csv`` (fixed columns),
and TensorBoard / Weights & Biases when installed and asked for; the peak FLOP/s behind MFU; and the watch on the
training rate that says when a CPU run looks shared (:func:`shared_cpu_slowdown`)."""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path

import torch

CSV_COLUMNS = ["step", "tokens", "loss", "lr", "grad_norm", "tokens_per_s", "tflops", "mfu",
               "eval_loss", "eval_accuracy", "elapsed_s"]

# Dense bf16 peak FLOP/s per device (vendor datasheets, without sparsity), for MFU.
PEAK_FLOPS = {"H100": 989e12, "H200": 989e12, "B200": 2250e12, "A100": 312e12, "L40S": 362e12, "A10": 125e12}


def peak_flops(device: torch.device, override: float | None) -> float | None:
    if override:
        return float(override)
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        for key, value in PEAK_FLOPS.items():
            if key in name:
                return value
    return None


def shared_cpu_slowdown(rates: list[float], warmup: int = 2, patience: int = 2,
                        threshold: float = 0.5) -> tuple[float, float] | None:
    """``(reference, now)`` when the training rate has fallen far below what this run reached, else None.

    ``rates`` are the tokens/s of successive logging windows, counting only the time spent fetching batches and
    stepping (evaluations and checkpoints excluded). The first ``warmup`` windows are skipped (first-step costs);
    the reference is the best later window before the last ``patience``; the rate has fallen when each of the last
    ``patience`` windows is under ``threshold`` times the reference (one slow window is noise, not a neighbour)."""
    if len(rates) < warmup + 1 + patience:
        return None
    reference = max(rates[warmup:-patience])
    recent = rates[-patience:]
    if all(r < threshold * reference for r in recent):
        return reference, recent[-1]
    return None


def shared_cpu_message(reference: float, now: float, threads: int) -> str:
    """What :func:`shared_cpu_slowdown`'s finding means for a run on ``threads`` CPU threads, and what to do."""
    return (f"note: training runs at {now:,.0f} tokens/s, {now / reference:.0%} of the {reference:,.0f} it reached "
            "after warm-up: "
            f"the CPU looks shared with other processes. With {threads} threads every step waits for the slowest "
            "one, and a thread on a busy core is slow; on a shared machine train.threads=1 (or one per idle core) "
            "is often faster. It may change on resume: stop (Ctrl-C saves a checkpoint), then "
            "`avey-b pretrain --config ... --resume train.threads=1`.")


class MetricsLogger:
    def __init__(self, run_dir: str | Path, enabled: bool, *, tensorboard: bool = False, wandb: bool = False,
                 wandb_project: str = "avey-b", config: dict | None = None, resume: bool = False):
        self.enabled = enabled
        self.start = time.time()
        self.tb = self.wandb = None
        if not enabled:
            return
        run_dir = Path(run_dir)
        mode = "a" if resume else "w"
        self.jsonl = open(run_dir / "metrics.jsonl", mode)
        csv_path = run_dir / "metrics.csv"
        new_csv = not (resume and csv_path.exists())
        self.csv_file = open(csv_path, mode if not new_csv else "w", newline="")
        self.csv = csv.DictWriter(self.csv_file, fieldnames=CSV_COLUMNS, extrasaction="ignore")
        if new_csv:
            self.csv.writeheader()
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter  # needs the `tensorboard` package

            self.tb = SummaryWriter(str(run_dir / "tensorboard"))
        if wandb:
            import wandb as wb  # optional; `pip install wandb`

            self.wandb = wb.init(project=wandb_project, dir=str(run_dir), config=config, resume="allow")

    def log(self, record: dict) -> None:
        if not self.enabled:
            return
        record = {**record, "elapsed_s": round(time.time() - self.start, 3)}
        self.jsonl.write(json.dumps(record) + "\n")
        self.jsonl.flush()
        self.csv.writerow(record)
        self.csv_file.flush()
        step = record.get("step", 0)
        if self.tb is not None:
            for k, v in record.items():
                if isinstance(v, (int, float)) and k != "step":
                    self.tb.add_scalar(k, v, step)
        if self.wandb is not None:
            self.wandb.log({k: v for k, v in record.items() if isinstance(v, (int, float))}, step=step)

    def close(self) -> None:
        if not self.enabled:
            return
        self.jsonl.close()
        self.csv_file.close()
        if self.tb is not None:
            self.tb.close()
        if self.wandb is not None:
            self.wandb.finish()
