"""Watching a pretraining run (the task scores of fine-tuning are :mod:`avey_b.evaluation.metrics`): metrics sinks
for a run (rank 0 only): ``metrics.jsonl`` (every record), ``metrics.csv`` (fixed columns),
and TensorBoard / Weights & Biases when installed and asked for; and the peak FLOP/s behind MFU. (The watch on the
training rate that says when a CPU run looks shared is :mod:`avey_b.utils.shared_cpu`, shared with the servers.)"""

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
