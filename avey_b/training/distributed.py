"""A few distributed helpers (nanochat's ``compute_init``/``print0``/``compute_cleanup``, lingua's
``parallelize_model``). The model code knows nothing about any of this.

Under ``torchrun`` (``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` set) ``init`` starts a process group — NCCL on GPU,
gloo on CPU; without it the run is a single process and nothing is initialized.
"""

from __future__ import annotations

import gc
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel as DDP


@dataclass
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def init(device: str = "auto") -> DistInfo:
    """Pick the device and, under torchrun, initialize the process group."""
    use_cuda = torch.cuda.is_available() if device == "auto" else device.startswith("cuda")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError("train.device='cuda' but no CUDA device is available")
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if use_cuda:
        dev = torch.device("cuda", local)
        torch.cuda.set_device(dev)
    else:
        dev = torch.device("cpu")
    if world > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if use_cuda else "gloo", device_id=dev if use_cuda else None)
    return DistInfo(rank, world, local, dev)


def cleanup(wait_for_all: bool = True) -> None:
    """Destroy the process group, after a barrier when ``wait_for_all`` (a run that ended normally on every rank).

    FSDP keeps the model, its buffers and pending collective work in reference cycles that only the garbage
    collector frees. Left to interpreter shutdown, that happens while gloo's worker threads still run; a worker
    that drops the last reference to a tensor then needs the interpreter lock, the finalizing interpreter exits
    the thread, and the process aborts ("terminate called without an active exception": about 1 two-rank FSDP
    run in 10 on a busy 2-core machine, seen with gdb). Collected here, gloo's threads end before shutdown."""
    if dist.is_available() and dist.is_initialized():
        gc.collect()
        if wait_for_all:
            dist.barrier()
        dist.destroy_process_group()
        gc.collect()


def print0(*args, **kwargs) -> None:
    if int(os.environ.get("RANK", "0")) == 0:
        print(*args, **kwargs, flush=True)


def all_reduce_sum(x: torch.Tensor, info: DistInfo) -> torch.Tensor:
    if info.enabled:
        dist.all_reduce(x, op=dist.ReduceOp.SUM)
    return x


def any_rank(flag: bool, info: DistInfo) -> bool:
    """True when ``flag`` is true on any rank (e.g. a SIGTERM seen by one process)."""
    if not info.enabled:
        return flag
    t = torch.tensor([1.0 if flag else 0.0], device=info.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item() > 0)


def uses_fsdp(info: DistInfo, strategy: str) -> bool:
    """Whether the model is sharded with FSDP2 (``distributed.strategy`` fsdp over several ranks): then saving,
    restoring and every forward pass are collectives of all ranks."""
    return info.enabled and strategy == "fsdp"


def parallelize(model: torch.nn.Module, info: DistInfo, strategy: str = "ddp", compile: bool = False):
    """compile, then DDP or FSDP2, applied to an unchanged model (torchtitan's order). Returns the wrapped model."""
    if compile:
        model = torch.compile(model)
    if not info.enabled:
        return model
    if strategy == "ddp":
        return DDP(model, device_ids=[info.local_rank] if info.device.type == "cuda" else None)
    if strategy == "fsdp":
        # shard each processor layer, then the rest (embedding / head) at the root
        for name in getattr(model, "_no_split_modules", None) or []:
            for m in model.modules():
                if type(m).__name__ == name:
                    fully_shard(m)
        fully_shard(model)
        return model
    raise ValueError(f"unknown distributed strategy {strategy!r}; choose ddp or fsdp")


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The plain model under DDP / torch.compile wrappers."""
    while True:
        if hasattr(model, "module") and isinstance(model, torch.nn.parallel.DistributedDataParallel):
            model = model.module
        elif hasattr(model, "_orig_mod"):
            model = model._orig_mod
        else:
            return model
