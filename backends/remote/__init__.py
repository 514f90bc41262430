"""Remote backends: a `race serve` server's contracts over HTTP (protocol ``race.remote/1``)."""

from backends.remote.adapter import RemoteAdapter
from backends.remote.decode import UPSTREAM, Exchange, decode_exchange

__all__ = ["UPSTREAM", "Exchange", "RemoteAdapter", "decode_exchange"]
