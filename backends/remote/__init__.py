"""Remote backends: a `race serve` server's contracts over HTTP (protocol ``race.remote/1``)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from backends.remote.adapter import RemoteAdapter
    from backends.remote.decode import UPSTREAM, Exchange, decode_exchange

# The adapter imports httpx (a tenth of a second or more): imported on first use, so that the
# server's side (``race.serving.limits``, which reads ``backends.remote.wire``) and a command
# that builds the CLI parser do not pay for the client.
_NAMES = {
    "RemoteAdapter": "backends.remote.adapter",
    "UPSTREAM": "backends.remote.decode",
    "Exchange": "backends.remote.decode",
    "decode_exchange": "backends.remote.decode",
}


def __getattr__(name: str) -> Any:
    if name not in _NAMES:
        raise AttributeError(f"module 'backends.remote' has no attribute {name!r}")
    value = getattr(importlib.import_module(_NAMES[name]), name)
    globals()[name] = value
    return value


__all__ = ["UPSTREAM", "Exchange", "RemoteAdapter", "decode_exchange"]
