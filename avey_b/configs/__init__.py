"""Configs as data: typed dataclass trees read from YAML, with ``key=value`` overrides, and the shipped configs.

One dialect for every config of the package (pretraining runs, evaluation suites, ablation experiments):

* ``load(Cls, "quickstart", ["optim.lr=1e-3"], kind="pretrain")`` reads a YAML file (a path, or the bare name of
  a config shipped in this package: ``avey_b/configs/<kind>/<name>.yaml``), applies the overrides (values parsed
  as YAML: ``1e-3``, ``true``, ``[a, b]``, ``null``) and builds ``Cls``. A key that does not exist is an error
  naming the key and the valid keys; numbers written as strings are coerced for numeric fields.
* A YAML file may say ``base: other.yaml`` (relative to itself) to start from another file.
* Each field's docstring (the string literal under it) is its documentation; ``describe(Cls)`` prints them all
  (the ``--help`` of ``avey-b pretrain``), and ``add_arguments(parser, Cls)`` makes one command-line flag per field
  from the same declaration (the fine-tuning settings of ``finetune`` / ``evaluate`` / ``niah evaluate``);
  ``guide_parser(prog, module)`` starts a verb's parser from the user guide in a module's docstring.

The YAML files beside this module ship in the wheel as package data, so ``--config quickstart`` works from any
installation, not only from a source checkout. PyYAML is imported only when a file is read or written, so the
model package does not need it.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib.util
import inspect
import textwrap
import types
import typing
from pathlib import Path
from typing import get_type_hints

from avey_b.model.config_keys import UnknownConfigKey, unknown_key  # noqa: F401  (the error of every config; re-exported)

CONFIG_DIR = Path(__file__).resolve().parent
KINDS = ("pretrain", "eval")
#: The precision policies every verb that runs a model takes (:func:`avey_b.utils.device.use_bf16` applies them):
#: ``auto``, bf16 autocast where the device multiplies bf16 natively, float32 elsewhere; ``bf16``; ``fp32``.
PRECISIONS = ("auto", "bf16", "fp32")


def dotted_keys(cls, prefix: str = "") -> list[str]:
    """Every key of the dataclass tree ``cls``, dotted (``optim.lr``), sections included."""
    hints, keys = get_type_hints(cls), []
    for f in dataclasses.fields(cls):
        keys.append(prefix + f.name)
        if dataclasses.is_dataclass(hints[f.name]):
            keys += dotted_keys(hints[f.name], prefix + f.name + ".")
    return keys


def check_keys(obj, keys, where: str) -> None:
    """Every key must be an attribute of ``obj`` (e.g. a transformers config); else :func:`unknown_key`."""
    for key in keys:
        if not hasattr(obj, key):
            raise unknown_key(key, [k for k in vars(obj) if not k.startswith("_")], where)


def shipped(kind: str) -> list[str]:
    """Names of the configs of ``kind`` that ship with the package."""
    if kind not in KINDS:
        raise ValueError(f"config kind must be one of {KINDS}, got {kind!r}")
    return sorted(p.stem for p in (CONFIG_DIR / kind).glob("*.yaml"))


def resolve(path: str | Path, kind: str) -> Path:
    """A YAML path, or the bare name of a shipped config
    (``quickstart`` -> ``avey_b/configs/pretrain/quickstart.yaml``).

    A missing file is an error that lists the shipped names."""
    p = Path(path)
    if p.exists():
        return p
    name = p.stem if p.suffix in (".yaml", ".yml") and len(p.parts) == 1 else str(path)
    candidate = CONFIG_DIR / kind / f"{name}.yaml"
    if candidate.exists():
        return candidate
    raise FileNotFoundError(f"config file not found: {str(path)!r} (neither a path nor a shipped {kind} config: "
                            f"{', '.join(shipped(kind))})")


def load(cls, path: str | Path | None = None, overrides: list[str] | None = None, *, kind: str):
    """``cls`` built from the YAML at ``path`` (a path or a shipped name; None: defaults) and ``overrides``."""
    data = read_yaml(resolve(path, kind)) if path else {}
    return build(cls, apply_overrides(data, overrides or []))


def build(cls, data: dict, prefix: str = "", root=None):
    """``cls`` from a nested mapping; unknown keys are errors that list the valid ones (``root``: the class of the
    whole tree, whose other sections the did-you-mean searches too)."""
    if not isinstance(data, dict):
        raise TypeError(f"config section {prefix.rstrip('.') or '<root>'!r} must be a mapping, "
                        f"got {type(data).__name__}")
    hints = get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        if key not in names:
            raise unknown_key(prefix + key, names, f"valid keys in {prefix.rstrip('.') or 'the root'}",
                              dotted_keys(root or cls))
        typ = hints[key]
        if dataclasses.is_dataclass(typ):
            kwargs[key] = build(typ, value or {}, prefix + key + ".", root or cls)
        else:
            kwargs[key] = _coerce(value, typ, prefix + key)
    return cls(**kwargs)


def _coerce(value, typ, key):
    # YAML parses `1e-3` as a string (YAML 1.1); accept numbers written that way for float/int fields.
    if value is None or (key.rpartition(".")[2] == "threads" and value == "auto"):  # auto: threads_flag's None
        return None
    base = [t for t in getattr(typ, "__args__", (typ,)) if t is not type(None)]
    if float in base and isinstance(value, (int, str)) and not isinstance(value, bool):
        try:
            return float(value)
        except ValueError as e:
            raise ValueError(f"config key {key!r} expects a number, got {value!r}") from e
    if int in base and isinstance(value, float) and value.is_integer():
        return int(value)
    if int in base and isinstance(value, str):
        try:
            return int(float(value))
        except ValueError as e:
            raise ValueError(f"config key {key!r} expects an integer, got {value!r}") from e
    if dict in base and not isinstance(value, dict):
        raise TypeError(f"config key {key!r} expects a mapping, got {value!r}")
    return value


def read_yaml(path: Path) -> dict:
    """A YAML mapping, with ``base: other.yaml`` resolved relative to the file."""
    import yaml

    if not path.exists():
        raise FileNotFoundError(f"config file not found: {str(path)!r}")
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise TypeError(f"{path}: the top level must be a mapping")
    base = data.pop("base", None)
    if base is not None:
        parent = read_yaml((path.parent / base).resolve())
        data = _merge(parent, data)
    return data


def _merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) and k != "overrides" else v
    return out


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Apply ``a.b.c=value`` overrides (value parsed as YAML) to a nested dict."""
    import yaml

    data = dict(data)
    for item in overrides:
        if "=" not in item:
            raise ValueError(f"override {item!r} is not of the form key=value (e.g. optim.lr=1e-3)")
        key, raw = item.split("=", 1)
        value = yaml.safe_load(raw) if raw != "" else None
        node = data
        parts = key.strip().split(".")
        for p in parts[:-1]:
            node[p] = dict(node.get(p) or {})
            node = node[p]
        node[parts[-1]] = value
    return data



def to_dict(cfg) -> dict:
    return dataclasses.asdict(cfg)


# ------------------------------------------------------------------------------------------ help text
def field_docs(cls) -> dict[str, str]:
    """The string literal under each field (litgpt style), a dataclass base's fields included (a field a subclass
    declares again takes the subclass's)."""
    docs = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            src = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):  # no source shipped (e.g. bytecode-only install): help without the docs
            continue
        body = ast.parse(src).body[0].body
        for a, b in zip(body, body[1:], strict=False):
            if (isinstance(a, ast.AnnAssign) and isinstance(b, ast.Expr)
                    and isinstance(getattr(b, "value", None), ast.Constant)):
                docs[a.target.id] = " ".join(str(b.value.value).split())
    return docs


def keys(root) -> list[tuple[str, object, str]]:
    """``(dotted key, default, documentation)`` of every key of the dataclass tree ``root`` (an instance: its values
    are the defaults), one level of sections deep."""
    out, docs = [], field_docs(type(root))
    for f in dataclasses.fields(root):
        value = getattr(root, f.name)
        if dataclasses.is_dataclass(value):
            sub = field_docs(type(value))
            out += [(f"{f.name}.{g.name}", getattr(value, g.name), sub.get(g.name, ""))
                    for g in dataclasses.fields(value)]
        else:
            out.append((f.name, value, docs.get(f.name, "")))
    return out


def describe(root) -> str:
    """Every key of the dataclass tree ``root`` (an instance: its values are the defaults shown), documented."""
    lines = ["config keys (override with key=value):"]
    lines += [f"  {key} = {default!r}\n      {doc}" for key, default, doc in keys(root)]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ flags
class _StoreTuple(argparse.Action):
    """``nargs`` values stored as a tuple, the type of a ``tuple[T, ...]`` field."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, tuple(values))


def _flag_type(typ) -> tuple[type, type | None]:
    """``(element type, container)`` of a field's annotation: ``int`` -> ``(int, None)``, ``list[int]`` ->
    ``(int, list)``, ``tuple[str, ...]`` -> ``(str, tuple)``, ``X | None`` as ``X``; else a TypeError."""
    if isinstance(typ, types.UnionType) or typing.get_origin(typ) is typing.Union:
        typ = next(a for a in typing.get_args(typ) if a is not type(None))
    container, args = typing.get_origin(typ), typing.get_args(typ)
    if container is list and len(args) == 1:
        typ = args[0]
    elif container is tuple and len(args) == 2 and args[1] is Ellipsis:
        typ = args[0]
    else:
        container = None
    if typ not in (bool, int, float, str) or (container and typ is bool):
        raise TypeError(f"a {typ} field has no command-line form")
    return typ, container


def threads_flag(text: str) -> int | None:
    """The value of every ``--threads`` flag: ``auto`` (None: the program picks the count and fits it to the machine,
    :class:`avey_b.utils.shared_cpu.ThreadTuner`) or a positive integer (that count, never changed)."""
    if text.strip().lower() == "auto":
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"takes auto or a positive number of CPU threads, got {text!r}")
    return value


def add_arguments(parser, cls, *, exclude=(), include=None, defaults: bool | dict = True,
                  choices: dict | None = None) -> list[str]:
    """One flag per field of the dataclass ``cls`` on ``parser`` (a parser or an argument group): ``--field-name``,
    typed by the field's annotation, documented by its docstring, stored under the field's name.

    * ``bool``: ``--x`` / ``--no-x``; a ``bool`` field named ``no_x`` (default False) is the switch ``--no-x`` alone.
    * ``list[T]`` / ``tuple[T, ...]`` (``T`` one of int, float, str): one or more values (``--lengths 128 256``),
      stored as that container.
    * A field without a default is a required flag.
    * A field named ``threads`` (``int | None``) takes ``auto`` (None, its default) or a count (:func:`threads_flag`).

    ``include`` / ``exclude``: which fields. ``defaults``: True, the dataclass's defaults; a mapping, those defaults
    changed for some fields; False, a flag not given is absent from the namespace (so that it can override a file).
    ``choices``: field -> allowed values (of each value, for a list). Returns the field names added."""
    hints, docs, added = get_type_hints(cls), field_docs(cls), []
    for f in dataclasses.fields(cls):
        if f.name in exclude or (include is not None and f.name not in include):
            continue
        try:
            typ, container = _flag_type(hints[f.name])
        except TypeError as e:
            raise TypeError(f"{cls.__name__}.{f.name}: {e}") from None
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        default = None if required else f.default if f.default is not dataclasses.MISSING else f.default_factory()
        if isinstance(defaults, dict):
            default = defaults.get(f.name, default)
        kw = {"help": docs.get(f.name, "")}
        if f.name == "threads" and defaults is not False:
            kw["help"] += f" (default: {'auto' if default is None else default})"
        elif typ is not bool and default is not None and defaults is not False:  # argparse shows a bool's itself
            kw["help"] += f" (default: {' '.join(map(str, default)) if container else default})"
        if required:
            kw["required"] = True
        else:
            kw["default"] = default if defaults is not False else argparse.SUPPRESS
        if typ is bool:
            switch = f.name.startswith("no_") and default is False
            kw["action"] = "store_true" if switch else argparse.BooleanOptionalAction
        else:
            kw["type"] = threads_flag if f.name == "threads" else typ
            if f.name == "threads":
                kw["metavar"] = "auto|N"
            if container:
                kw["nargs"] = "+"
                if container is tuple:
                    kw["action"] = _StoreTuple
            if choices and f.name in choices:
                kw["choices"] = choices[f.name]
        parser.add_argument("--" + f.name.replace("_", "-"), dest=f.name, **kw)
        added.append(f.name)
    return added


def from_args(cls, args: argparse.Namespace, **given):
    """``cls`` from the namespace of :func:`add_arguments` (its fields that the namespace lacks keep their
    defaults), then ``given``."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in vars(args).items() if k in names} | given)


def guide_parser(prog: str, module: str) -> argparse.ArgumentParser:
    """A verb's parser described by the docstring of ``module`` (first paragraph: the description; the rest: the
    epilog), read from the source without importing the module (the verbs' modules import torch)."""
    spec = importlib.util.find_spec(module)
    with open(spec.origin, encoding="utf-8") as f:
        doc = ast.get_docstring(ast.parse(f.read())) or ""
    head, _, rest = doc.partition("\n\n")
    return argparse.ArgumentParser(prog=prog, description=head, epilog=rest,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
