"""The model's code, saved beside its weights, so that a saved Avey-B loads where this package is not installed.

``save_pretrained`` (every head, and so every command that saves a model) writes the modules the model is made of
next to ``config.json`` as ``avey_b_<module>.py`` and records them in the config's ``auto_map``: transformers'
custom-code mechanism then builds the classes from those files, in a process that cannot import ``avey_b``::

    AutoModelForMaskedLM.from_pretrained(directory, trust_remote_code=True)

In a process that has imported ``avey_b``, transformers prefers the classes the package registered (they are
"explicit local code") and the saved files do not run, so a user who upgrades the package gets the upgrade.

In a process that has *not* imported ``avey_b`` (installed or not: transformers learns model types only from code
that runs), the ``AutoConfig`` entry of ``auto_map`` is what makes every loader that reads ``config.json`` ask for
``trust_remote_code=True``: ``AutoModel*``, ``pipeline``, ``SentenceTransformer``, and ``AutoTokenizer`` too, which
reads the model's ``config.json`` before the tokenizer's files (without the flag it asks on a terminal, then warns).
The entry cannot go: without it no flag would load the model where the package is absent. A tokenizer alone loads
without the question through ``PreTrainedTokenizerFast.from_pretrained(directory)``, which reads only its own files.

The files are this package's own modules with their relative imports renamed (``from .layers import`` ->
``from .avey_b_layers import``); the model's modules import nothing else from the package, which the rewrite checks.
transformers copies a saved module's relative imports by matching ``from .name import`` lines, so a
``from . import name`` gets such a line beside it.
"""

from __future__ import annotations

import re
from pathlib import Path

#: The model's modules, leaves first (each imports only those before it).
MODULES = ("config_keys", "file_modes", "release", "execution", "configuration", "similarity", "layers",
           "ranker_fast", "ranker", "splits", "loading", "modeling", "sparse", "heads")
PREFIX = "avey_b_"

#: Auto class -> "module.Class" of the saved code, for every head an Avey-B checkpoint may be loaded as.
AUTO_CLASSES = {
    "AutoConfig": "configuration.AveyBConfig",
    "AutoModel": "modeling.AveyBModel",
    "AutoModelForMaskedLM": "heads.AveyBForMaskedLM",
    "AutoModelForSequenceClassification": "heads.AveyBForSequenceClassification",
    "AutoModelForTokenClassification": "heads.AveyBForTokenClassification",
    "AutoModelForQuestionAnswering": "heads.AveyBForQuestionAnswering",
    "AutoModelForMultipleChoice": "heads.AveyBForMultipleChoice",
}

_PACKAGE = Path(__file__).resolve().parent
_FROM_MODULE = re.compile(r"^(\s*)from \.(\w+) import ", re.MULTILINE)
_FROM_PACKAGE = re.compile(r"^(\s*)from \. import (\w+(?:\s*,\s*\w+)*)\s*$", re.MULTILINE)


def auto_map() -> dict[str, str]:
    """The ``auto_map`` of a saved config: each Auto class to its class in the saved files."""
    return {auto: PREFIX + target for auto, target in AUTO_CLASSES.items()}


def module_source(name: str) -> str:
    """The source of ``avey_b/model/<name>.py`` as saved: relative imports renamed to the saved files."""
    source = (_PACKAGE / f"{name}.py").read_text(encoding="utf-8")

    def check(module: str) -> str:
        if module not in MODULES:
            raise RuntimeError(f"avey_b/model/{name}.py imports .{module}, which is not saved with the model: "
                               "add it to avey_b.model.remote_code.MODULES or keep the model's code free of it")
        return PREFIX + module

    source = _FROM_MODULE.sub(lambda m: f"{m.group(1)}from .{check(m.group(2))} import ", source)

    def package_import(m: re.Match) -> str:  # `from . import a, b`: each module under its saved name
        indent, lines = m.group(1), []
        for module in (x.strip() for x in m.group(2).split(",")):
            lines += [f"{indent}from .{check(module)} import __name__ as _{module}_file  # noqa: F401  (found by "
                      "transformers)", f"{indent}from . import {PREFIX}{module} as {module}"]
        return "\n".join(lines)

    source = _FROM_PACKAGE.sub(package_import, source)
    if re.search(r"^\s*from \.\.", source, re.MULTILINE):
        raise RuntimeError(f"avey_b/model/{name}.py imports from outside the package directory; it cannot be saved")
    header = (f"# Saved by the avey-b library (Apache-2.0) from avey_b/model/{name}.py, so that this model loads with\n"
              "# trust_remote_code=True where the library is not installed. Where it is, its own classes are used.\n")
    return header + source


def write(directory: str | Path) -> None:
    """Write the model's modules into ``directory`` (a model directory ``save_pretrained`` is filling)."""
    for name in MODULES:
        (Path(directory) / f"{PREFIX}{name}.py").write_text(module_source(name), encoding="utf-8")
