"""The error for a config key that does not exist, shared by the model's config and the run configs.

A leaf (standard library only): the model's code, which is also saved beside its weights, imports it.
"""

from __future__ import annotations

import difflib


class UnknownConfigKey(KeyError, ValueError):
    """A key the config class does not have (a ``KeyError`` and a ``ValueError``); the message lists the valid keys."""

    def __str__(self) -> str:
        return str(self.args[0])


def unknown_key(key: str, valid, where: str, elsewhere=()) -> UnknownConfigKey:
    """The error for a key that is not one of ``valid``: names it, the valid key it most likely meant, and the valid
    keys. ``elsewhere``: the dotted keys of the whole config tree, searched too (``train.lr`` -> ``optim.lr``): the
    same name in another section first, then the closest name in this section, then the closest anywhere."""
    valid = sorted(valid)
    section, _, leaf = key.rpartition(".")
    same_name = [k for k in elsewhere if k.rpartition(".")[2] == leaf and k != key]
    close = [section + "." + m if section else m for m in difflib.get_close_matches(leaf, valid, n=1)]
    if not same_name and not close:
        leaves = {k.rpartition(".")[2]: k for k in sorted(elsewhere, reverse=True)}
        close = [leaves[m] for m in difflib.get_close_matches(leaf, leaves, n=1)]
    guess = (same_name or close or [None])[0]
    hint = f" (did you mean {guess!r}?)" if guess else ""
    return UnknownConfigKey(f"unknown config key {key!r}{hint}; {where}: {valid}")
