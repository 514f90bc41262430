"""What an engine opens beside an index: remote servers, a statistics file, and the
contracts shipped with the adapters."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from backends import LOCAL_ADAPTERS, Adapter
from planner import Statistics
from rsc import Contract


def connect_remotes(
urls: Sequence[str], *, timeout: float = 5.0) -> dict[str, Adapter]:
    """Remote adapters by backend name. Every remote contract names the one backend ``remote``,
    so an engine reaches at most one server."""
    from backends.remote import RemoteAdapter
    from rsc import InputError

    if len(urls) > 1:
        raise InputError(
            f"{len(urls)} remotes given; the remote contracts name one backend 'remote', so an engine reaches "
            "one server",
            where="--remote",
        )
    adapters: dict[str, Adapter] = {}
    for url in urls:
        adapters[RemoteAdapter.backend] = RemoteAdapter.connect(url, timeout=timeout)
    return adapters


def load_statistics(path: Path) -> Statistics:
    from pydantic import ValidationError

    from rsc import InputError, first_validation_error
    from rsc.canonical import read_json

    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", where=str(path)) from exc
    try:
        return Statistics.model_validate(read_json(data, where=str(path), error=InputError))
    except ValidationError as exc:
        raise InputError(first_validation_error(exc), where=str(path)) from exc


def known_contracts(*, remote: bool = False) -> tuple[Contract, ...]:
    """Every contract shipped with the local adapters (and, with ``remote``, the remote
    adapter's), sorted by id and version."""
    from backends import RemoteAdapter

    adapters: tuple[type[Adapter], ...] = (*LOCAL_ADAPTERS, RemoteAdapter) if remote else LOCAL_ADAPTERS
    return tuple(sorted((c for a in adapters for c in a.contracts()), key=lambda c: (c.rsc_id, c.version)))
