"""The Ray backend of ``avey-b embed`` (``--backend ray``): shards embedded by a Ray Data pipeline of model-holding
actors, laid out, recorded and resumed exactly as by the local backend. Ray is an optional extra
(``pip install 'avey-b[ray]'``), imported only here, when the backend runs."""

from __future__ import annotations

import contextlib
import json
import pickle
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from avey_b.apps.embed.embedder import encoder_for, run_shard
from avey_b.apps.embed.inputs import Document
from avey_b.apps.embed.options import LONG_DOCUMENT_TOKENS, EmbedOptions
from avey_b.apps.embed.shards import Settings
from avey_b.utils.cluster import cluster_gpus, start_ray


@dataclass(frozen=True)
class RayBackend:
    """The job's Ray: the actors' device, GPUs per actor and number, the wave (shards per actor read at once), and
    each actor's CPU threads (None: the default of :func:`avey_b.utils.device.set_cpu_threads`)."""

    device: str
    num_gpus: float
    concurrency: int
    wave: int
    threads: int | None = None

    @classmethod
    def start(cls, options: EmbedOptions, cleanup: contextlib.ExitStack) -> RayBackend:
        """Connect to the cluster at ``options.ray_address`` or start a local Ray
        (:func:`avey_b.utils.cluster.start_ray`, shut down by ``cleanup``); the GPUs per actor default to 1 where the
        cluster has GPUs, and the actors' device to CUDA where they have one."""
        ray = start_ray(options.ray_address, cleanup, data=True)
        num_gpus = options.num_gpus
        if num_gpus is None:
            num_gpus = 1 if cluster_gpus(ray) >= 1 else 0
        device = options.load.device if options.load.device != "auto" else ("cuda" if num_gpus else "cpu")
        return cls(device, num_gpus, options.concurrency, options.ray_wave, options.load.threads)

    @property
    def shards_per_pipeline(self) -> int:
        return self.wave * self.concurrency


class RayShardWriter:
    """A Ray Data actor (``map_batches``, one shard a batch): loads the model once, then embeds and writes whole
    shards with :func:`~avey_b.apps.embed.embedder.run_shard`, as the local backend does, into OUTPUT (a filesystem
    every node sees)."""

    def __init__(self, model_dir: str, out: str, settings: Settings, max_batch_tokens: int, device: str,
                 kept_schema=None, threads: int | None = None, long_tokens: int = LONG_DOCUMENT_TOKENS):
        self.encoder = encoder_for(model_dir, device=device, precision=settings.precision, threads=threads)
        self.out, self.settings, self.max_batch_tokens = Path(out), settings, max_batch_tokens
        self.kept_schema, self.long_tokens = kept_schema, long_tokens

    def __call__(self, batch: dict) -> dict:
        infos = []
        for k, docs in zip(batch["shard"], batch["docs"], strict=True):
            group: list[Document] = pickle.loads(docs)  # noqa: S301 (the driver's own documents)
            info = run_shard(self.encoder, int(k), group, self.out, self.settings, self.max_batch_tokens,
                             self.kept_schema, self.long_tokens)
            infos.append(json.dumps(info))
        return {"info": infos}


def run_on_ray(pending: list[tuple[int, list[Document]]], model_dir: Path, out: Path, settings: Settings,
               max_batch_tokens: int, backend: RayBackend, kept_schema=None,
               long_tokens: int = LONG_DOCUMENT_TOKENS) -> Iterator[dict]:
    """Run pending shards (a wave) as a Ray Data pipeline — the shards' documents, read in order by the driver →
    ``map_batches`` over ``backend.concurrency`` :class:`RayShardWriter` actors (the model loaded once per actor,
    ``backend.num_gpus`` each) → one Parquet shard each (``kept_schema``: the kept columns' types, the driver's),
    written by the actor — and yield each shard's metadata as
    it finishes. The actors write the shards themselves (not ``Dataset.write_parquet``, whose files are named by
    Ray's blocks) so that OUTPUT is laid out, and resumes, exactly as with the local backend."""
    import ray

    ray.data.DataContext.get_current().enable_progress_bars = False  # the job's own progress line reports
    # the documents travel pickled: kept columns hold any value pyarrow reads (dates, bytes, nested rows)
    items = [{"shard": k, "docs": pickle.dumps(group)} for k, group in pending]
    results = ray.data.from_items(items).map_batches(
        RayShardWriter, batch_size=1, concurrency=backend.concurrency, num_gpus=backend.num_gpus,
        num_cpus=0 if backend.num_gpus else 1,
        fn_constructor_kwargs={"model_dir": str(model_dir), "out": str(out), "settings": settings,
                               "max_batch_tokens": max_batch_tokens, "device": backend.device,
                               "kept_schema": kept_schema, "threads": backend.threads,
                               "long_tokens": long_tokens})
    for row in results.iter_rows():
        yield json.loads(row["info"])
