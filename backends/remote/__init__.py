"""Remote backends: a `race serve` server's contracts over HTTP (protocol ``race.remote/1``)."""

from backends.remote.adapter import UPSTREAM, Exchange, RemoteAdapter, decode_exchange

__all__ = ["UPSTREAM", "Exchange", "RemoteAdapter", "decode_exchange"]
