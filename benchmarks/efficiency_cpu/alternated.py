"""Avey-B base against ModernBERT-base at its fastest, alternated in one process: the ratios the READMEs quote.

    python benchmarks/efficiency_cpu/alternated.py --text runs/efficiency_cpu/english.txt --lengths 512 2048 4096 8192

``avey-b bench run`` times one model's series after another (minutes apart on a machine that drifts); this times
the models in turns — A, B, C, A, B, C, ... — at each length, on the same real-text ids (cl100k, renumbered into
each model's vocabulary), one forward per turn after a warm-up of each, with an fp32 GEMM timed in the same
process before and after (the machine's state during the rounds).

A model is ``SPEC[@ATTENTION]``: the baseline once per attention implementation (by default ModernBERT-base with
``flex_attention`` and ``sdpa``, the same weights), so that every ratio is against the baseline's fastest
attention here, with the sdpa figure beside it. ``flex_attention`` compiles its kernel on the warm-up call of each
length, with static shapes (:func:`avey_b.benchmarking.attention.static_shapes`); the warm-up's seconds are
recorded (``first_call_s``). ``flash_attention_2`` is recorded as unavailable where it cannot run (every CPU).
Same-model variants' outputs are compared (``max_abs_diff``: the largest difference of the last hidden states).

Prints one JSON line per length — every turn's wall and CPU seconds, each baseline's per-round ratios over the
first model and their median, the fastest variant of each baseline, the load average before and after — and
appends it to ``--out``.
"""

from __future__ import annotations

import argparse
import statistics

import torch

from avey_b.benchmarking.attention import is_compiled, static_shapes, unavailable_reason
from avey_b.benchmarking.inputs import text_ids
from avey_b.benchmarking.timing import alternate, gemm_rate, timed_call
from avey_b.utils.model_spec import build_config, is_avey_b, random_model
from avey_b.utils.records import Envelope, append_jsonl

DEFAULT_MODELS = ["avey-b-base", "modernbert-base@flex_attention", "modernbert-base@sdpa",
                  "modernbert-base@flash_attention_2"]


def parse_model(name: str) -> tuple[str, str | None]:
    """``SPEC[@ATTENTION]`` -> (spec, attention or None)."""
    spec, _, attn = name.partition("@")
    return spec, attn or None


def build_models(names: list[str]) -> tuple[dict[str, tuple], dict[str, str]]:
    """The runnable models ``{name: (config, model)}`` (variants of one spec share its weights) and the
    ``{name: reason}`` of those that cannot run here."""
    models: dict[str, tuple] = {}
    skipped: dict[str, str] = {}
    weights: dict[str, dict] = {}
    for name in names:
        spec, attn = parse_model(name)
        config = build_config(spec)
        if attn is not None and is_avey_b(config):
            raise SystemExit(f"{name}: Avey-B has no attention implementation to choose")
        reason = unavailable_reason(attn, "cpu") if attn else None
        if reason:
            skipped[name] = reason
            continue
        torch.manual_seed(0)
        model = random_model(config, attn_implementation=attn)
        if spec in weights:
            model.load_state_dict(weights[spec])
        else:
            weights[spec] = model.state_dict()
        models[name] = (config, model)
    return models, skipped


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--text", nargs="+", required=True, help="text files (see avey_b/benchmarking/english_text.py)")
    p.add_argument("--models", nargs="+", default=DEFAULT_MODELS,
                   help="SPEC[@ATTENTION] ...; the first is the one every ratio is over (default: %(default)s)")
    p.add_argument("--lengths", type=int, nargs="+", default=[512, 2048, 4096, 8192])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default="benchmarks/efficiency_cpu/alternated.jsonl")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    text = text_ids(args.text)
    models, skipped = build_models(args.models)
    first = args.models[0]
    if first not in models:
        raise SystemExit(f"{first} cannot run here: {skipped[first]}")
    for n in args.lengths:
        env = Envelope.begin()
        inputs = {name: text.batch(c.vocab_size, 1, n)[:2] for name, (c, _) in models.items()}
        outputs: dict[str, torch.Tensor] = {}

        def forward(name, inputs=inputs):
            ids, mask = inputs[name]
            with torch.no_grad():
                return models[name][1](input_ids=ids, attention_mask=mask).last_hidden_state

        with static_shapes():  # flex_attention compiles its kernel for this length alone, on the warm-up call
            g0 = gemm_rate(torch.float32)
            first_call = {}
            for name in models:  # warm-up (and the outputs compared)
                first_call[name], _, outputs[name] = timed_call(lambda name=name: forward(name))
            timed = alternate({name: (lambda name=name: forward(name)) for name in models}, args.rounds)
            g1 = gemm_rate(torch.float32)
        seconds = {name: t.times_s for name, t in timed.items()}
        cpu = {name: t.cpu_times_s for name, t in timed.items()}
        ratios = {name: [tb / ta for ta, tb in zip(seconds[first], seconds[name], strict=True)]
                  for name in models if name != first}
        by_spec: dict[str, list[str]] = {}
        for name in models:
            by_spec.setdefault(parse_model(name)[0], []).append(name)
        fastest = {spec: min(names, key=lambda m: statistics.median(seconds[m]))
                   for spec, names in by_spec.items() if len(names) > 1}
        diffs = {name: float((outputs[name] - outputs[names[0]]).abs().max())
                 for names in by_spec.values() for name in names[1:]}
        rec = {"length": n, "models": list(models), "first": first, "ids": text.source, "threads": args.threads,
               "rounds": args.rounds, "seconds": seconds, "cpu_seconds": cpu,
               "median_s": {name: statistics.median(s) for name, s in seconds.items()},
               "first_call_s": first_call, "compiled_per_length": [m for m in models if is_compiled(parse_model(m)[1])],
               "ratio_over_first": ratios,
               "ratio_median": {name: statistics.median(r) for name, r in ratios.items()},
               "cpu_ratio_median": {name: statistics.median(b / a for a, b in zip(cpu[first], cpu[name], strict=True))
                                    for name in ratios},
               "fastest": fastest, "max_abs_diff": diffs, "unavailable": skipped,
               "gemm_fp32_flop_s": (g0 + g1) / 2, **env.end()}
        append_jsonl(args.out, rec, echo=True)


if __name__ == "__main__":
    main()
