"""The job of ``avey-b embed`` (the package docstring is its guide): :func:`embed_corpus`, the Python API, and
:func:`run`, the command's runner."""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import torch

from avey_b.apps.embed.embedder import encoder_for, local_model_dir, run_shard
from avey_b.apps.embed.inputs import (
    Document,
    check_columns,
    count_documents,
    file_documents,
    input_files,
    read_documents,
)
from avey_b.apps.embed.options import DEFAULT_SHARD_TOKENS, EmbedOptions, embed_options
from avey_b.apps.embed.ray import RayBackend, run_on_ray
from avey_b.apps.embed.shards import (
    MANIFEST,
    RECORDED_OPTIONS,
    SHARD,
    Settings,
    check_rerun,
    documents_done,
    finish_manifest,
    found_shard,
    infer_types,
    manifest_of,
    parquet_types,
    previous_manifest,
    shard_schema,
    start_manifest,
)
from avey_b.apps.embed.streamed import Pieces
from avey_b.apps.embed.update import Updater, finish_switch, put_in_place
from avey_b.data import corpus
from avey_b.inference.encoder import Encoder
from avey_b.utils.batching import default_max_tokens
from avey_b.utils.device import pick_device, use_bf16
from avey_b.utils.files import content_hash, sha256_of_file
from avey_b.utils.locks import exclusive_directory
from avey_b.utils.progress import Progress
from avey_b.utils.records import utc_timestamp, write_json_atomic

#: The files whose SHA-256 the manifest records: a rerun with other weights or another tokenizer is refused.
MODEL_FILES = ("config.json", "*.safetensors", "pytorch_model*.bin")
TOKENIZER_FILES = ("tokenizer*.json", "special_tokens_map.json", "vocab.*", "merges.txt", "*.model")


def file_hashes(directory: Path, patterns: tuple[str, ...]) -> dict[str, str]:
    """SHA-256 of each file of ``directory`` matching ``patterns`` (name -> hex)."""
    names = sorted({p.name for pattern in patterns for p in directory.glob(pattern) if p.is_file()})
    return {name: sha256_of_file(directory / name) for name in names}


def record_settings(encoder: Encoder, source: str, options: EmbedOptions, previous: dict | None) -> Settings:
    """What the vectors depend on, from the options: the model's and tokenizer's files, the input, and the options
    that change a vector or the layout, resolved (``max_tokens``, precision). Sparse outputs of a model without a
    masked-LM head, and token vectors of one without a multi-vector head, are refused here, before anything is
    written."""
    if "sparse" in options.outputs:
        encoder.require("sparse")
    if "multivector" in options.outputs and "multivector" not in encoder.kinds:
        raise ValueError(f"--outputs multivector needs a multi-vector model (AveyBForMultiVector: token vectors for "
                         f"late interaction); {encoder.name} is a {encoder.architecture}: train one with "
                         "`avey-b finetune --task multi-vector`")
    hf = source.startswith("hf:")
    before = (previous or {}).get("settings", {})
    max_tokens = options.max_tokens
    if max_tokens is None:  # what memory allows; on a rerun, what the first run used (memory differs run to run)
        max_tokens = before.get("max_tokens") or default_max_tokens(encoder.config.hidden_size)
    # the shard caps left out: on a rerun, the first run's (the first format's: shard_size only), else the defaults
    shard_size, shard_tokens = options.shard_size, options.shard_tokens
    if shard_size is None and previous:
        shard_size = before.get("shard_size")
    if shard_tokens is None:
        shard_tokens = before.get("shard_tokens") if previous else DEFAULT_SHARD_TOKENS
    given = {name: list(v) if isinstance(v := getattr(options, name), tuple) else v for name in RECORDED_OPTIONS}
    return Settings(
        model_sha256=file_hashes(encoder.path, MODEL_FILES),
        tokenizer_sha256=file_hashes(encoder.path, TOKENIZER_FILES),
        input_sha256=None if hf else content_hash(source),
        hf_dataset={"name": source[3:], "config": options.hf_config, "split": options.hf_split} if hf else None,
        shard_size=shard_size, max_tokens=max_tokens, precision="bf16" if encoder.bf16 else "fp32",
        shard_tokens=shard_tokens, **given)


def _check_new_ids(group: list[Document], seen: dict[str, str]) -> None:
    """Refuse an id met before (``seen``: id → where it was read), and record ``group``'s."""
    for d in group:
        if d.id in seen:
            raise ValueError(f"{d.where}: duplicate id {d.id!r} (first at {seen[d.id]})")
        seen[d.id] = d.where


def scan_input(source: str, options: EmbedOptions) -> tuple[int | None, object]:
    """Read local input with columns (.jsonl, .parquet) once whole before anything is embedded: every row checked
    (text, id, chunk spans, kept columns) and every id unique, so that bad input stops the job before its first
    shard; and fix the kept columns' Arrow types for every shard (:func:`~avey_b.apps.embed.shards.infer_types` over
    the JSON values, the Parquet files' own types, unified). Return the number of documents (the progress line's
    total) and those types (None: no kept column, or ``hf:`` input, whose first shard fixes them)."""
    if source.startswith("hf:"):
        return None, None
    files = list(input_files(source))
    if all(f.suffix.lower() in corpus.TEXT_SUFFIXES for f, _ in files):
        return count_documents(source, options), None
    seen, schema, columns = {}, None, list(options.keep_columns)
    for f, name in files:
        docs = file_documents(f, name, options)
        for batch in iter(lambda: list(itertools.islice(docs, 1024)), []):  # noqa: B023 (used at once)
            _check_new_ids(batch, seen)
            if columns and f.suffix.lower() not in corpus.PARQUET_SUFFIXES:
                schema = infer_types(batch, columns, schema)
        if columns and f.suffix.lower() in corpus.PARQUET_SUFFIXES:
            schema = parquet_types(f, columns, schema)
    return len(seen), schema


def shard_groups(docs: Iterator[Document], count_tokens, settings: Settings) -> Iterator[list[Document]]:
    """``docs`` cut into shards, in order: consecutive documents of at most ``settings.shard_tokens`` tokens in all
    (a longer document is a shard alone) and at most ``settings.shard_size`` documents; ``count_tokens`` gives the
    tokens of a list of documents (the model's tokenizer, special tokens included). The same input and settings give
    the same shards, which is what lets a rerun find the finished ones."""
    group, tokens = [], 0
    for batch in iter(lambda: list(itertools.islice(docs, 256)), []):
        lengths = count_tokens(batch) if settings.shard_tokens is not None else [0] * len(batch)
        for doc, n in zip(batch, lengths, strict=True):
            full = (settings.shard_tokens is not None and tokens + n > settings.shard_tokens) or (
                settings.shard_size is not None and len(group) == settings.shard_size)
            if group and full:
                yield group
                group, tokens = [], 0
            group.append(doc)
            tokens += n
    if group:
        yield group


def _token_counter(encoder: Encoder):
    """The tokens of a list of documents, special tokens included (what shards are cut by)."""
    return lambda docs: [len(ids) for ids in encoder.tokenize([d.text for d in docs])["input_ids"]]


def _update_shards(docs: Iterator[Document], out: Path, encoder: Encoder, settings: Settings, run: dict,
                   bar: Progress, options: EmbedOptions, kept_schema) -> tuple[Updater, dict[int, dict], int]:
    """``--update``: the new input cut into shards as a fresh run cuts them, each found or computed into the stage
    (:class:`~avey_b.apps.embed.update.Updater`); return the updater, every shard's metadata and the documents."""
    updater, seen, infos = Updater(encoder, settings, out, options.max_batch_tokens), {}, {}
    for k, group in enumerate(shard_groups(docs, updater.count_tokens, settings)):  # unchanged: counts as recorded
        _check_new_ids(group, seen)
        if settings.keep_columns and kept_schema is None:  # hf: input: the first shard's types
            kept_schema = infer_types(group, settings.keep_columns)
        infos[k] = updater.shard(k, group, kept_schema)
        bar.update(len(group))
    run["update"] = updater.record(set(seen))
    run.update(shards_found=updater.shards["staged"] + updater.shards["kept"],
               shards_written=updater.shards["written"])
    return updater, infos, len(seen)


def _embed_shards(docs: Iterator[Document], out: Path, encoder: Encoder, settings: Settings, manifest: dict,
                  run: dict, bar: Progress, options: EmbedOptions, ray: RayBackend | None, kept_schema
                  ) -> tuple[dict[int, dict], int]:
    """Cut ``docs`` into shards and embed those not written yet — here, or on Ray in waves of ``ray_wave *
    concurrency`` shards — recording each written shard in the manifest; return every shard's metadata (by number)
    and how many documents were read. ``kept_schema``: the kept columns' types (None: fixed by the first shard)."""
    seen, infos, pending, tokens, started = {}, {}, [], 0, time.monotonic()

    def written(info: dict) -> None:
        nonlocal tokens
        infos[info["shard"]] = info
        run["shards_written"] += 1
        write_json_atomic(out / MANIFEST, manifest)  # the run's record says how far it got
        tokens += info["tokens"]
        elapsed = time.monotonic() - started
        bar.update(info["documents"], **{"tokens/s": tokens / elapsed if elapsed > 0 else 0.0})

    def flush() -> None:  # the Ray backend's shards read so far: one Ray Data pipeline
        for info in run_on_ray(pending, encoder.path, out, settings, options.max_batch_tokens, ray, kept_schema,
                               options.long_document_tokens):
            written(info)
        pending.clear()

    for k, group in enumerate(shard_groups(docs, _token_counter(encoder), settings)):
        _check_new_ids(group, seen)
        path = out / SHARD.format(k)
        if settings.keep_columns and kept_schema is None:  # hf: input: the first shard's types, as written
            kept_schema = (shard_schema(path, settings.keep_columns) if path.exists()
                           else infer_types(group, settings.keep_columns))
        if path.exists():
            infos[k] = found_shard(path, group)
            run["shards_found"] += 1
        elif ray is None:
            written(run_shard(encoder, k, group, out, settings, options.max_batch_tokens, kept_schema,
                              options.long_document_tokens))
        else:
            pending.append((k, group))
        if ray is not None and len(pending) == ray.shards_per_pipeline:
            flush()
    if pending:
        flush()
    return infos, len(seen)


def embed_corpus(model: str, source: str, output: str | os.PathLike, options: EmbedOptions = EmbedOptions()) -> dict:
    """Embed the documents of ``source`` into Parquet shards under ``output`` and return the manifest; rerun with
    the same settings, finish what a killed run left. ``model``, ``source``, ``output`` and ``options`` are the
    arguments of ``avey-b embed`` (the package docstring)."""
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise ImportError("avey-b embed writes Parquet with pyarrow: pip install 'avey-b[embed]'") from None
    check_columns(source, options)
    total, kept_schema = scan_input(source, options)  # bad input stops here, before anything is written
    with exclusive_directory(output, "avey-b embed"):  # a second job on this directory is refused while it runs
        return _embed_into(model, source, Path(output), options, total, kept_schema)


def _embed_into(model: str, source: str, out: Path, options: EmbedOptions, total: int | None, kept_schema) -> dict:
    """:func:`embed_corpus` once the input is checked and the directory's lock is held."""
    if out.is_dir():
        finish_switch(out)  # an update that stopped after its commit, during its renames
    previous = previous_manifest(out)

    with contextlib.ExitStack() as cleanup:  # a Ray started here is shut down however the job ends
        model_dir = local_model_dir(model)
        ray = RayBackend.start(options, cleanup) if options.backend == "ray" else None
        target = torch.device(ray.device) if ray else pick_device(options.load.device)  # where the forwards run
        resolved = "bf16" if use_bf16(options.load.precision, target) else "fp32"
        encoder = encoder_for(model_dir, device="cpu" if ray else options.load.device, precision=resolved,
                              threads=options.load.threads)
        recorded = record_settings(encoder, source, options, previous)
        check_rerun(out, previous, recorded, update=options.update)
        run = {"started": utc_timestamp(), "device": str(target), "max_batch_tokens": options.max_batch_tokens,
               "backend": options.backend, "shards_found": 0, "shards_written": 0}
        if ray is None:
            run["threads"] = encoder.threads if target.type == "cpu" else None
            first, *notes = encoder.describe().split("\n")  # the start line, then any note on a busy CPU
            how = Pieces(encoder, recorded, options.long_document_tokens).start_line(options.update)
            print("\n".join([f"{first}; {how}", *notes]), file=sys.stderr, flush=True)
        if ray:
            run.update(ray_address=options.ray_address, concurrency=ray.concurrency, num_gpus=ray.num_gpus)
        if options.update:  # the old manifest stays until the update commits
            out.mkdir(parents=True, exist_ok=True)
            manifest = manifest_of(model, source, encoder, recorded, previous, run)
        else:
            manifest = start_manifest(out, model, source, encoder, recorded, previous, run)

        started = time.monotonic()
        with Progress(total, f"embed {Path(source).name}", unit="doc",
                      initial=0 if options.update else documents_done(out), enabled=options.progress) as bar:
            encoder.watch_shared_cpu(bar.write, "stop the job and run it again with --threads 1 (or one per idle "
                                                "core): it resumes where it stopped")
            docs = read_documents(source, options)
            if options.update:
                updater, infos, documents = _update_shards(docs, out, encoder, recorded, run, bar, options,
                                                           kept_schema)
            else:
                infos, documents = _embed_shards(docs, out, encoder, recorded, manifest, run, bar, options, ray,
                                                 kept_schema)
        if ray is None and target.type == "cpu":
            run["threads"] = encoder.threads  # with auto, the count it ended on
        if options.update:  # the manifest written into the stage commits the update; then the renames
            finish_manifest(updater.stage, source, manifest, run, infos, documents, started)
            put_in_place(out, manifest)
        else:
            finish_manifest(out, source, manifest, run, infos, documents, started)
        return manifest


def run(args: argparse.Namespace) -> int:
    """``avey-b embed MODEL INPUT OUTPUT [options]`` (parsed by :func:`avey_b.apps.embed.options.embed_parser`)."""
    manifest = embed_corpus(args.model, args.input, args.output, embed_options(args))
    counts, last = manifest["counts"], manifest["runs"][-1]
    print(f"embedded {counts['embedded']:,} of {counts['documents']:,} documents ({counts['rows']:,} vectors, "
          f"{counts['tokens']:,} tokens) into {args.output}: {last['shards_written']} shard(s) written, "
          f"{last['shards_found']} found done, {counts['skipped']} document(s) skipped (listed in "
          f"{Path(args.output) / MANIFEST})", flush=True)
    if "update" in last:
        done = last["update"]
        staged = (f" (and {done['tokens_computed_staged']:,} by the update that stopped, whose shards were staged)"
                  if done.get("tokens_computed_staged") else "")
        print("updated: " + ", ".join(f"{n:,} {a}" for a, n in done["documents"].items()) + f" document(s); "
              f"{done['tokens_computed']:,} of {done['tokens_total']:,} tokens computed{staged}; saved states "
              f"{manifest['state']['bytes']:,} bytes beside {manifest['state']['shard_bytes']:,} of shards", flush=True)
    return 0
