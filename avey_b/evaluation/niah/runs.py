"""One fine-tuning of ``niah evaluate`` (a model x task x form x learning rate x seed x train length) and its
scores at its test lengths, resumable from its run directory. The fine-tunings of a model on a task
(:func:`training_plan`): one at the train length scored at every test length, or, as the paper's authors ran
NIAH (``--train-length each``), one per test length trained on the train set of that length."""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import transformers

from avey_b.utils import model_spec
from avey_b.utils.device import start_runtime
from avey_b.utils.files import content_hash, load_json
from avey_b.utils.progress import Progress
from avey_b.utils.records import save_pretrained_atomic, slug, write_json_atomic

from ...data.niah import parse_lengths
from ..finetune import train_model
from ..protocol import avey_b_settings
from ..tasks.base import end_token, input_limit, input_limit_rule, pad_id_of, use_encodeval_pad
from ..tasks.qa import QuestionAnsweringTask
from .answer_tokens import token_classification_features, train_token_classifier
from .forms import HEADLINE, OPTIMIZER, longest_input
from .models import load_model_and_tokenizer
from .scoring import score_length
from .sets import available_lengths, read_set, set_path, squad_examples
from .tables import cell_text, chance_text


def training_plan(args, task: str) -> list[tuple[int, list[int]]]:
    """The fine-tunings of one model on ``task``: (train length, the test lengths it is scored at) each — one at
    ``args.train_length`` scored at every test length, or with ``--train-length each`` one per test length L,
    trained on ``train_L.jsonl`` and scored on ``test_L.jsonl`` (EncodEval's NIAH: train and test files of one
    length). A missing train set is named."""
    task_dir = os.path.join(args.data, task)
    lengths = available_lengths(task_dir, parse_lengths(args.lengths) if args.lengths else None)
    if not args.each_length:
        return [(parse_lengths([args.train_length])[0], lengths)]
    missing = [n for n in lengths if not os.path.isfile(set_path(task_dir, "train", n))]
    if missing:
        raise FileNotFoundError(f"{task_dir}: --train-length each needs a train set at every test length; none at "
                                f"{missing} (`avey-b niah generate --protocol paper` writes them)")
    return [(n, [n]) for n in lengths]


def run_settings(name: str, task: str, lr: float, args, cfg, lengths: list[int], train_length: int
                 ) -> dict[str, Any]:
    """What defines one fine-tuning and its scores: a rerun must match it to reuse them (the device, the scoring
    batch, the CPU threads and whether the ranker statistic is recorded do not change a score and are left out)."""
    task_dir = os.path.join(args.data, task)
    run = {k: v for k, v in cfg.to_dict().items() if k not in ("device", "threads", "eval_batch_size", "lr", "seed")}
    return {"model": name, "task": task, "form": args.form, "lr": lr, "seed": args.seed,
            "tokenizer": args.tokenizer, "run_config": run, "micro_batch": args.micro_batch,
            "optimizer": {k: list(v) if isinstance(v, tuple) else v for k, v in OPTIMIZER[args.form].items()},
            "train": {"length": train_length,
                      "sha256": content_hash(set_path(task_dir, "train", train_length))},
            "test": {str(n): content_hash(set_path(task_dir, "test", n)) for n in lengths}}


def settings_differ(a: dict[str, Any], b: dict[str, Any], prefix: str = "") -> list[str]:
    """The dotted keys whose values differ between two settings."""
    out = []
    for k in sorted(set(a) | set(b)):
        x, y = a.get(k), b.get(k)
        if isinstance(x, dict) and isinstance(y, dict):
            out += settings_differ(x, y, f"{prefix}{k}.")
        elif x != y:
            out.append(f"{prefix}{k}")
    return out


def refuse_changed(where: str, old: dict[str, Any] | None, new: dict[str, Any]) -> None:
    if old is None:
        raise SystemExit(f"avey-b niah evaluate: {where} holds results without their settings (an older version): "
                         "use another --out rather than mix them")
    changed = settings_differ(old, new)
    if changed:
        raise SystemExit(f"avey-b niah evaluate: {where} was run with other settings ({', '.join(changed)}); use "
                         "another --out, or the same settings to resume, rather than mix them")


def run_directory(out: str, name: str, task: str, form: str, lr: float, seed: int, train_length: int | None = None
                  ) -> str:
    """A fine-tuning's directory; ``train_length`` names it when each length has its own (``--train-length each``)."""
    leaf = f"lr{lr:g}-seed{seed}" + ("" if train_length is None else f"-train{train_length}")
    return os.path.join(out, "runs", slug(name), task, form, leaf)


def planned_run(name: str, task: str, lr: float, args, train_length: int, lengths: list[int]
                ) -> tuple[Any, dict[str, Any]]:
    """(the fine-tuning's :class:`~avey_b.evaluation.tasks.base.RunConfig`, its :func:`run_settings`) for ``name``
    on ``task`` at ``lr``, trained at ``train_length`` and scored at ``lengths`` (one of :func:`training_plan`)."""
    cfg = dataclasses.replace(args.settings, lr=lr, seed=args.seed)
    return cfg, run_settings(name, task, lr, args, cfg, lengths, train_length)


def record_train_length(rec: dict[str, Any]) -> int | None:
    """The train length of a record of :func:`evaluate_model` (in its settings)."""
    return (rec.get("settings") or {}).get("train", {}).get("length")


@dataclass
class FineTuning:
    """One fine-tuning of ``niah evaluate`` once its model is built: what fine-tuning and scoring it read."""

    name: str
    task: str
    args: Any  # the NiahEvaluateOptions of the evaluation
    cfg: Any  # the fine-tuning's RunConfig (the qa form's window set from the training inputs)
    run_dir: str
    model: Any
    tok: Any
    limit: int | None  # the model's maximum input length (None: no limit)
    train_len: int  # the longest training input, in tokens
    end: str | None = None  # the authors' inputs' end token (paper protocol: EncodEval's); None: the form's own
    cut: bool = False  # inputs past ``limit`` truncated (EncodEval's rule, paper protocol) instead of recorded "—"

    @property
    def task_dir(self) -> str:
        return os.path.join(self.args.data, self.task)


def evaluate_model(name: str, task: str, args, lr: float | None = None, log=print,
                   plan: tuple[int, list[int]] | None = None) -> dict[str, Any]:
    """Fine-tune ``name`` on ``task``'s train split in ``args.form``, then score every test length (or "—"/"OOM");
    ``plan``: (train length, test lengths), one of :func:`training_plan` (default: its first).

    Under the paper protocol the authors' inputs end with EncodEval's token (:func:`~avey_b.evaluation.tasks.base.
    end_token` of the model's config: its eos, else the unknown token), batches are padded with EncodEval's pad id
    (:func:`~avey_b.evaluation.tasks.base.encodeval_pad_id`), the weights are bf16 (``weights_dtype``) and the
    authors' checkpoints run the release's padding (:func:`~avey_b.evaluation.protocol.avey_b_settings`); the
    record holds each (``end_token``, ``pad_id``, ``weights_dtype``, ``avey_b``).

    Resumable: the run directory (:func:`run_directory`) holds ``settings.json``, the fine-tuned model and
    ``train.json`` once training finished, and one ``length_<L>.json`` per scored length, each written atomically;
    a rerun reuses them (a run with other settings is refused). The model is deleted once every length is done."""
    lr = args.lr[0] if lr is None else lr
    train_length, lengths = plan or training_plan(args, task)[0]
    train_rows = read_set(set_path(os.path.join(args.data, task), "train", train_length))
    if args.settings.max_train_examples:
        train_rows = train_rows[: args.settings.max_train_examples]
    cfg, settings = planned_run(name, task, lr, args, train_length, lengths)
    run_dir = run_directory(args.out, name, task, args.form, lr, args.seed,
                            train_length if args.each_length else None)
    settings_path = os.path.join(run_dir, "settings.json")
    if os.path.exists(settings_path):
        refuse_changed(run_dir, load_json(settings_path), settings)
    else:
        write_json_atomic(settings_path, settings)
    trained = os.path.exists(os.path.join(run_dir, "train.json"))

    device, _, _ = start_runtime(cfg.device, cfg.precision, cfg.threads, what=f"niah {task} of {name}")
    transformers.set_seed(args.seed)
    model, tok, limit, how = load_model_and_tokenizer(name, args, cfg,
                                                      weights=os.path.join(run_dir, "model") if trained else None)
    model.to(device)
    paper = cfg.protocol == "paper" and args.form == "token-classification"
    end = end_token(tok, model.config) if paper else None
    if paper:  # EncodEval cuts every input at round(0.99 x the stated length), the answer possibly with it
        limit = input_limit(model.config, tok, "paper")
        use_encodeval_pad(tok, model.config)  # and pads with the config's pad id, else its end token
    avey_b = avey_b_settings(model.config, cfg)  # the authors' checkpoints: the release's padding under paper
    if avey_b is not None:
        model.config.padding = avey_b["padding"]  # read at every forward pass
    train_len = longest_input(tok, squad_examples(train_rows), args.form, end)
    if args.form == "qa":  # train on whole examples (one window each) unless the model cannot take the train length
        cfg = dataclasses.replace(cfg, max_length=min(train_len, limit) if limit else train_len,
                                  doc_stride=min(128, max(0, (min(train_len, limit or train_len)) // 4)))
    run = FineTuning(name, task, args, cfg, run_dir, model, tok, limit, train_len, end, cut=paper)
    training = fine_tune(run, train_rows, log)
    retrieval = getattr(args, "retrieval", True) and model_spec.is_avey_b(model.config)
    return {"model": name, "built": how, "task": task, "form": args.form, "max_length": limit,
            "input_limit_rule": input_limit_rule(model.config, "paper") if paper else "the model's window, not cut",
            "train": training,
            "lr": lr, "seed": args.seed, "device": str(device), "settings": settings, "protocol": cfg.protocol,
            "end_token": end, "avey_b": avey_b, "pad_id": pad_id_of(tok),
            "weights_dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
            "results": score_lengths(run, lengths, retrieval, log)}


def fine_tune(run: FineTuning, train_rows: list[dict[str, Any]], log) -> dict[str, Any]:
    """Fine-tune the run's model on ``train_rows`` in its form and return the training record; or, when an
    earlier run of this fine-tuning finished training (its model was loaded), read that record back. The model is saved
    first, then the record (``train.json``): the record marks a finished training."""
    args, cfg, tok = run.args, run.cfg, run.tok
    train_path = os.path.join(run.run_dir, "train.json")
    if os.path.exists(train_path):
        log(f"{run.name} {run.task} lr {cfg.lr:g} seed {args.seed}: fine-tuned earlier ({run.run_dir}), "
            "resuming the scoring")
        return load_json(train_path)
    t0 = time.perf_counter()
    device = next(run.model.parameters()).device
    if args.form == "qa":
        qa = QuestionAnsweringTask()
        features = qa.train_features(squad_examples(train_rows), tok, cfg)
        training = train_model(run.model, qa, features, cfg, pad_id_of(tok), device)
    else:
        features = token_classification_features(tok, train_rows, max_length=run.limit, end=run.end)
        training = train_token_classifier(run.model, features, cfg, args.micro_batch, pad_id_of(tok), device)
    training |= {"examples": len(train_rows), "input_tokens": run.train_len, "seconds": time.perf_counter() - t0}
    save_pretrained_atomic(Path(run.run_dir) / "model", run.model, None)
    write_json_atomic(train_path, training)
    log(f"{run.name} {run.task} lr {cfg.lr:g}: trained {training['steps']} steps, loss {training['loss_first']:.3f} "
        f"-> {training['loss_last']:.3f}")
    return training


def score_lengths(run: FineTuning, lengths: list[int], retrieval: bool, log) -> dict[str, dict[str, Any]]:
    """Each test length's result (:func:`score_length`), read back from the run directory when an earlier run
    scored it, else scored and written there; after a length that ran out of memory the longer ones are not
    tried."""
    results, stop = {}, None
    progress = Progress(len(lengths), f"niah {run.name} {run.task}", unit="length", every=0.0)
    for length in lengths:
        path = os.path.join(run.run_dir, f"length_{length}.json")
        if os.path.exists(path):
            res = load_json(path)
        else:
            res = score_length(run.model, run.tok, run.task_dir, length, run.args, run.cfg, run.limit,
                               run.train_len, stop, retrieval, run.end, cut=run.cut)
            write_json_atomic(path, res)
        if res["status"] == "oom" and stop is None:
            stop = length
        results[str(length)] = res
        log(f"  {run.task} {length}: {cell_text(res, HEADLINE[run.args.form])} (chance {chance_text(res)})")
        progress.update()
    progress.close()
    return results
