"""What an engine opens: the instances of a catalog, remote servers, a statistics file, and
the contracts shipped with the adapters."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from backends import LOCAL_ADAPTERS, Adapter
from planner import Statistics
from rsc import Contract

if TYPE_CHECKING:
    from backends.models.embedding import Embedder
    from race.indexing.catalog import Catalog, EmbedderRef, Instance


def connect_remotes(urls: Sequence[str], *, timeout: float = 5.0) -> dict[str, Adapter]:
    """Remote adapters by backend name. Every remote contract names the one backend ``remote``,
    so an engine reaches at most one server."""
    if not urls:
        return {}  # without importing the HTTP client
    from backends.remote import RemoteAdapter
    from rsc import BackendUnavailable, InputError

    if len(urls) > 1:
        raise InputError(
            f"{len(urls)} remotes given; the remote contracts name one backend 'remote', so --remote reaches one "
            "server (list each server as a race-remote instance of a --catalog)",
            where="--remote",
        )
    adapters: dict[str, Adapter] = {}
    for url in urls:
        try:
            adapters[RemoteAdapter.backend] = RemoteAdapter.connect(url, timeout=timeout)
        except BackendUnavailable as exc:
            # A server named on the command line that does not answer is bad input (exit 2),
            # not an internal error; the message names the URL and what it said.
            raise InputError(f"{url}: {_unwrapped(exc)} (is `race serve` running there?)", where="--remote") from exc
    return adapters


def _unwrapped(exc: BaseException) -> str:
    """The message of a ``RaceError`` without the ``where:`` prefix it was given."""
    where = getattr(exc, "where", None)
    text = str(exc)
    return text.removeprefix(f"{where}: ") if where else text


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


# -- catalog instances ----------------------------------------------------------------------


def resolve_embedder(ref: EmbedderRef, *, where: str, instance: str, base: Path) -> Embedder:
    """The embedder a catalog names, its identity checked against what the catalog states: the
    bundled MiniLM, a folder (``path``), or, for another name with its ``dims`` and
    ``weights_sha256``, an identity RACE cannot run (caller vectors only)."""
    from backends.models.embedding import MINILM_NAME, MiniLMEmbedder
    from backends.models.folder import CallerVectorsOnly, FolderEmbedder
    from rsc import EmbedderIdentity, InputError

    embedder: Embedder
    if ref.path is not None:
        try:
            embedder = FolderEmbedder(
                _located(ref.path, base),
                name=ref.name,
                query_prompt=ref.query_prompt,
                document_prompt=ref.document_prompt,
            )
            identity = embedder.identity
        except InputError as exc:
            raise InputError(f"instance {instance}: embedder.path: {exc}", where=where) from exc
    elif ref.name == MINILM_NAME:
        embedder = MiniLMEmbedder()
        identity = embedder.identity
    elif ref.dims is not None and ref.weights_sha256 is not None:
        identity = EmbedderIdentity(
            name=ref.name, dims=ref.dims, weights_sha256=ref.weights_sha256, config_sha256=ref.config_sha256
        )
        embedder = CallerVectorsOnly(identity)
    else:
        raise InputError(
            f"instance {instance}: embedder {ref.name!r} is not known (known: {MINILM_NAME}); give its folder "
            "('path'), or its 'dims' and 'weights_sha256' to search it with caller vectors only",
            where=where,
        )
    for field in ("weights_sha256", "config_sha256", "dims"):
        stated = getattr(ref, field)
        if stated is not None and stated != getattr(identity, field):
            raise InputError(
                f"instance {instance}: embedder.{field} is {stated!r}, but {ref.name} has {getattr(identity, field)!r}",
                where=where,
            )
    return embedder


def index_adapters(
    index_dir: Path, *, remotes: Sequence[str] = (), remote_timeout: float = 5.0, milvus: Sequence[Path] = ()
) -> dict[str, Adapter]:
    """The local backends a ``race index`` directory built, by backend name, with the remote
    server of ``remotes`` and the Milvus collection of ``milvus`` (``race.indexing.attach.open_milvus``)."""
    from race.indexing.attach import open_milvus
    from race.indexing.indexing import read_manifest

    built = read_manifest(index_dir).get("backends", [])
    adapters: dict[str, Adapter] = {}
    for adapter in LOCAL_ADAPTERS:
        if isinstance(built, list) and adapter.backend in built:
            adapters[adapter.backend] = adapter.open(index_dir)
    adapters.update(connect_remotes(remotes, timeout=remote_timeout))
    adapters.update(open_milvus(milvus))
    return adapters


def open_catalog(path: Path) -> dict[str, Adapter]:
    """The instances of the catalog file ``path`` (``open_instances``)."""
    from race.indexing.catalog import load_catalog

    return open_instances(load_catalog(path), base=path.parent, where=str(path))


def open_instances(catalog: Catalog, *, base: Path, where: str) -> dict[str, Adapter]:
    """Every instance of ``catalog`` as an adapter by instance name (relative locations are
    read from ``base``), its contracts weakened as the catalog says. If one cannot be opened,
    the ones opened before it are closed and the error names the instance."""
    from race.indexing.catalog_contracts import weakened

    adapters: dict[str, Adapter] = {}
    try:
        for name, instance in sorted(catalog.instances.items()):
            adapter = _open_instance(name, instance, base=base, where=where)
            adapters[name] = adapter
            if instance.contracts:
                adapter.generated_contracts = weakened(
                    adapter.index_contracts(), instance.contracts, instance=name, where=where
                )
    except BaseException:
        close_all(adapters.values())
        raise
    return adapters


def close_all(adapters: Iterable[Adapter]) -> None:
    """Close adapters from synchronous code (a catalog that failed half way)."""
    import contextlib

    import anyio

    for adapter in adapters:
        # Closing is best effort: the error that stopped the opening is the one to report.
        with contextlib.suppress(Exception):
            anyio.run(adapter.aclose)


def _located(location: str, base: Path) -> Path:
    """A catalog path, relative to the catalog's folder, with symbolic links resolved: one
    instance reached by two spellings is one milvus-lite data folder, not two."""
    path = Path(location).expanduser()
    return (path if path.is_absolute() else base / path).resolve()


def _open_instance(name: str, instance: Instance, *, base: Path, where: str) -> Adapter:
    from backends.named import NamedInstance
    from rsc import BackendUnavailable, IndexMissingError, InputError

    embedder = (
        resolve_embedder(instance.embedder, where=where, instance=name, base=base)
        if instance.embedder is not None
        else None
    )
    kind = instance.kind
    try:
        adapter = _adapter(name, instance, base=base, embedder=embedder)
    except ImportError as exc:
        raise InputError(f"instance {name}: a {instance.kind} instance needs its extra ({exc})", where=where) from exc
    except IndexMissingError as exc:
        said = str(exc)
        raise IndexMissingError(
            said if said.startswith("instance ") else f"instance {name}: {said}", where=where
        ) from exc
    except BackendUnavailable as exc:
        if kind != "race-remote":
            raise
        # A server the catalog names that does not answer is bad input (exit 2), as with --remote.
        raise InputError(
            f"instance {name}: {instance.location}: {_unwrapped(exc)} (is `race serve` running there?)", where=where
        ) from exc
    return adapter if adapter.backend == name else NamedInstance(adapter, name)


def _adapter(name: str, instance: Instance, *, base: Path, embedder: Embedder | None) -> Adapter:
    kind = instance.kind
    if instance.shards:
        from backends.sharding.sharded import ShardedAdapter

        shard_kind = _race_built(kind)
        dirs = [_located(d, base) for d in instance.shards]
        return ShardedAdapter(name, [_open_built(shard_kind, d, embedder) for d in dirs])
    assert instance.location is not None
    if kind == "race-remote":
        from backends.remote import RemoteAdapter

        return RemoteAdapter.connect(instance.location, timeout=instance.timeout_s)
    if kind == "lancedb" and instance.fields is not None:
        from backends.lancedb.attached import AttachedLanceAdapter

        assert embedder is not None and instance.table is not None
        uri = instance.location if "://" in instance.location else str(_located(instance.location, base))
        return AttachedLanceAdapter(
            name=name,
            uri=uri,
            table=instance.table,
            mapping=instance.fields,
            embedder=embedder,
            vector=instance.vector,
            key_domain=instance.key_domain,
            check_vectors=instance.check_vectors,
        )
    if kind == "milvus" and instance.fields is not None:
        from backends.milvus.attached import AttachedMilvusAdapter

        assert embedder is not None and instance.collection is not None
        uri = instance.location if "://" in instance.location else str(_located(instance.location, base))
        return AttachedMilvusAdapter(
            name=name, uri=uri, collection=instance.collection, mapping=instance.fields, embedder=embedder,
            vector=instance.vector, key_domain=instance.key_domain, timeout=instance.timeout_s,
            consistency=instance.consistency,
        )  # fmt: skip
    path = _located(instance.location, base)
    if kind == "tantivy" and instance.fields is not None:
        from backends.tantivy.attached import AttachedTantivyAdapter

        return AttachedTantivyAdapter(name=name, path=path, mapping=instance.fields, key_domain=instance.key_domain)
    if kind == "milvus":
        from backends.milvus import MilvusAdapter

        return MilvusAdapter.open(path, embedder=embedder, timeout=instance.timeout_s, consistency=instance.consistency)
    return _open_built(_race_built(kind), path, embedder)


def _race_built(kind: str) -> type[Adapter]:
    """The adapter of an index ``race index`` builds, by kind."""
    return next(a for a in LOCAL_ADAPTERS if a.backend == kind)


def _open_built(kind: type[Adapter], index_dir: Path, embedder: Embedder | None) -> Adapter:
    from backends.lancedb import LanceAdapter, LanceIndex

    if kind is LanceIndex:
        return LanceAdapter.open(index_dir, embedder=embedder)
    return kind.open(index_dir)
