"""Optional extras: a feature whose library is not installed is one line naming the exact
install command, exit 2 (bad input: the environment asked for what it does not have)."""

from __future__ import annotations

import importlib
from types import ModuleType

from rsc import InputError

EXTRAS: dict[str, tuple[str, str]] = {
    "haystack": ("haystack", "haystack-ai"),
    "ir_measures": ("eval", "ir-measures"),
    "llama_index.core": ("llamaindex", "llama-index-core"),
    "matplotlib": ("eval", "matplotlib"),
    "pandas": ("pandas", "pandas"),
    "ray": ("ray", "ray"),
}
"""An importable module -> the extra that installs it and its distribution name."""


class ExtraMissing(InputError):
    """A feature's optional library is not installed."""


def require(module: str, *, feature: str, where: str) -> ModuleType:
    """``module`` imported, or ``ExtraMissing`` naming ``pip install 'race-engine[<extra>]'``."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        extra, dist = EXTRAS[module]
        raise ExtraMissing(
            f"{feature} needs {dist}, which is not installed: pip install 'race-engine[{extra}]'", where=where
        ) from exc
