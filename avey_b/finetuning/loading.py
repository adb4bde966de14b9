"""The base model of an own-data task, loaded with the task's new head, and its config aligned with the tokenizer
before transformers' ``Trainer`` sees it.

* A task head (a classifier over the encoder) is new by design: the checkpoint is a pretrained encoder, so its
  weights are initialized here and trained by the run. transformers reports every such load as a table of
  ``MISSING`` keys ("LOAD REPORT"); :func:`load_with_new_head` holds that report back for exactly this case (the
  missing keys all outside the base model, i.e. the new head; unexpected ones, if any, also outside it: the
  checkpoint's pretraining head, which the task does not use; no shape mismatch, no error) and says it in one line
  (``new head: classifier.* (initialized, trained by this run)``). Any other report (a missing encoder weight, a
  mismatched shape) is shown as transformers wrote it. :class:`NewHeadReport` does it around any load (a
  sentence-transformers ``CrossEncoder``'s too).
* ``Trainer`` copies the tokenizer's PAD/BOS/EOS ids into a model config that lacks them and warns that it did
  ("The tokenizer has new PAD/BOS/EOS tokens..."). A config saved without them (an Avey-B pretrained before
  pretraining wrote them) is the model's own tokenizer's ids not yet written down, not a disagreement:
  :func:`fill_special_ids` writes them first. A config id that differs from the tokenizer's is left alone, and
  ``Trainer``'s warning about it stays.
"""

from __future__ import annotations

import logging
import re
from typing import Any

SPECIAL_IDS = ("pad_token_id", "bos_token_id", "eos_token_id")


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_STATUS_KEYS = {"MISSING": "missing_keys", "UNEXPECTED": "unexpected_keys"}


class NewHeadReport(logging.Filter):
    """Holds transformers' load reports back while a model loads, then either says the load in the library's line
    (:func:`new_head_line`) or lets the reports through as they are::

        with NewHeadReport() as report:
            model = CrossEncoder(path, num_labels=1)
            report.settle(model[0].auto_model)

    ``settle(model, info)`` takes ``from_pretrained``'s ``output_loading_info``; without it the held report's rows
    are read (``key | STATUS``). A block that raises lets the held reports through."""

    def __init__(self):
        super().__init__()
        self.held: list[logging.LogRecord] = []

    def __enter__(self) -> NewHeadReport:
        from transformers.modeling_utils import logger

        self.logger = logger
        logger.addFilter(self)
        return self

    def __exit__(self, *exc) -> None:
        self.logger.removeFilter(self)
        self._release()

    def filter(self, record: logging.LogRecord) -> bool:
        if "LOAD REPORT" in str(record.msg):
            self.held.append(record)
            return False
        return True

    def _release(self) -> None:
        held, self.held = self.held, []
        for record in held:
            self.logger.handle(record)

    def settle(self, model, info: dict[str, Any] | None = None) -> None:
        """Say the held report in one line where it is only the new head, else let it through. With ``info`` the
        line is said whether or not transformers wrote its report (its verbosity may be lowered)."""
        self.logger.removeFilter(self)
        if info is None and not self.held:
            return
        line = new_head_line(model, info if info is not None else self.rows())
        if line is not None:
            self.held = []
            print(line, flush=True)
        self._release()

    def rows(self) -> dict[str, set]:
        """The held reports' keys by status (``missing_keys``, ``unexpected_keys``; any other status in
        ``mismatched_keys``), read from their ``key | STATUS`` rows."""
        found: dict[str, set] = {"missing_keys": set(), "unexpected_keys": set(), "mismatched_keys": set()}
        for record in self.held:
            for line in _ANSI.sub("", record.getMessage()).splitlines():
                cells = [cell.strip() for cell in line.split("|")]
                if len(cells) >= 2 and cells[1].isupper() and cells[1] != "STATUS":
                    found[_STATUS_KEYS.get(cells[1], "mismatched_keys")].add(cells[0])
        return found


def _modules(keys) -> str:
    """Parameter names as their top modules, ``classifier.weight, classifier.bias`` -> ``classifier.*``."""
    return ", ".join(sorted({key.split(".")[0] + ".*" for key in keys}))


def new_head_line(model, info: dict[str, Any]) -> str | None:
    """The library's line for a load whose report is only the new head (see the module docstring), else None."""
    prefix = getattr(model, "base_model_prefix", "") + "."
    missing, unexpected = info.get("missing_keys") or set(), info.get("unexpected_keys") or set()
    if prefix == "." or not missing or info.get("mismatched_keys") or info.get("error_msgs"):
        return None
    if any(key.startswith(prefix) for key in (*missing, *unexpected)):
        return None
    unused = f"; the checkpoint's {_modules(unexpected)} (its pretraining head) is not used" if unexpected else ""
    return f"new head: {_modules(missing)} (initialized, trained by this run){unused}"


def load_with_new_head(auto_class, name_or_path: str, **kwargs):
    """``auto_class.from_pretrained(name_or_path, **kwargs)`` (a missing model named as the model), with transformers'
    load report replaced by :func:`new_head_line`'s line where that is all it says (:class:`NewHeadReport`)."""
    from avey_b.utils.files import model_source

    with NewHeadReport() as report, model_source(name_or_path):
        model, info = auto_class.from_pretrained(name_or_path, output_loading_info=True, **kwargs)
        report.settle(model, info)
    return model


def fill_special_ids(model, tokenizer) -> dict[str, int]:
    """Write the tokenizer's PAD/BOS/EOS ids into the model's config (and generation config, if it has one) where
    they are unset; returns what was written. Ids already set are left as they are. ``model`` and ``tokenizer``
    are a trainer's (``trainer.model``, ``trainer.processing_class``), called before ``trainer.train()``."""
    config = getattr(model, "config", None)
    if config is None:  # a sentence-transformers model without a transformers model inside: nothing to align
        return {}
    config = config.get_text_config()
    generation = getattr(model, "generation_config", None)
    written = {}
    for name in SPECIAL_IDS:
        token_id = getattr(tokenizer, name, None)
        if token_id is None:
            continue
        for target in (config, generation):
            if target is not None and getattr(target, name, None) is None:
                setattr(target, name, token_id)
                written[name] = token_id
    return written
