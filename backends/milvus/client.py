"""The Milvus client edge: the collection's constants, its field layout, and the translation of
client errors into RACE errors (``BackendUnavailable`` / ``BackendTimeout``)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

import grpc
from pymilvus import DataType, MilvusClient, MilvusException
from pymilvus.client.types import Status

from backends.ingest.schema import FieldType
from rsc import BackendTimeout, BackendUnavailable

_log = logging.getLogger(__name__)

MANIFEST: Final = "race.json"
DEFAULT_COLLECTION: Final = "race_chunks"
LITE_FILE: Final = "milvus.db"
VECTOR: Final = "vector"
CONSISTENCY: Final = "Strong"

MODE_FLAT: Final = "milvus_flat"
MODE_ANN: Final = "milvus_ann"
FLAT_CONTRACT: Final = "milvus.flat_prefilter"
ANN_CONTRACT: Final = "milvus.ann_filtered"
INDEX_TYPES: Final = ("FLAT", "HNSW")

HNSW_BUILD: Final = {"M": 16, "efConstruction": 200}
HNSW_MIN_EF: Final = 64
MAX_TOPK: Final = 16_384
"""Milvus's own bound on a search's limit (and on a query's offset + limit)."""
TIE_MARGIN: Final = 8
"""Rows read past k so that ties at the k-th distance are broken by chunk id, not by Milvus."""
DEFAULT_TIMEOUT_S: Final = 10.0

_VARCHAR_MAX: Final = 65_535
_INSERT_BATCH: Final = 256
_EMBED_BATCH: Final = 64
_QUERY_VECTORS: Final = 256
_READ_BATCH: Final = 1_000
_TEXT_FIELDS: Final = (
    "doc_id",
    "title",
    "section",
    "text",
    "source_path",
    "source_hash",
    "corpus_revision",
    "metadata_json",
)
_INT_FIELDS: Final = ("line_start", "line_end")
_NULLABLE_INT_FIELDS: Final = ("char_start", "char_end")
_ROW_FIELDS: Final = ("chunk_id", *_TEXT_FIELDS, *_INT_FIELDS, *_NULLABLE_INT_FIELDS)
"""Every stored field but the vector: custody is rebuilt from them."""
_METADATA_TYPES: Final = {
    FieldType.KEYWORD: DataType.VARCHAR,
    FieldType.DATE: DataType.VARCHAR,
    FieldType.DATETIME: DataType.INT64,
    FieldType.INTEGER: DataType.INT64,
    FieldType.FLOAT: DataType.DOUBLE,
    FieldType.BOOLEAN: DataType.BOOL,
}
"""Milvus field types of the schema's scalar types (``keyword[]`` is an ARRAY of VARCHAR). Dates
are ISO strings (string order is date order); datetimes microseconds since the epoch."""
_COUNTED_TYPES: Final = frozenset(
    {FieldType.KEYWORD, FieldType.KEYWORDS, FieldType.DATE, FieldType.INTEGER, FieldType.BOOLEAN}
)

RECALL_QUERIES: Final = 40
RECALL_K: Final = 10


# -- the client edge -----------------------------------------------------------------------------


@contextmanager
def milvus_errors(where: str) -> Iterator[None]:
    """Client failures as RACE errors: a deadline is a ``BackendTimeout``, anything else the
    client or server raised a ``BackendUnavailable``."""
    try:
        yield
    except grpc.FutureTimeoutError as exc:
        raise BackendTimeout(f"milvus did not answer in time: {exc}", where=where) from exc
    except grpc.RpcError as exc:
        code = exc.code() if isinstance(exc, grpc.Call) else None
        if code is grpc.StatusCode.DEADLINE_EXCEEDED:
            raise BackendTimeout(f"milvus did not answer in time: {exc}", where=where) from exc
        raise BackendUnavailable(f"milvus rpc failed: {exc}", where=where) from exc
    except MilvusException as exc:
        message = str(getattr(exc, "message", exc))
        if "deadline" in message.lower() or "timeout" in message.lower():
            raise BackendTimeout(f"milvus did not answer in time: {message}", where=where) from exc
        raise BackendUnavailable(f"milvus failed: {message}", where=where) from exc
    except (OSError, ValueError, TypeError) as exc:
        raise BackendUnavailable(f"milvus client failed: {type(exc).__name__}: {exc}", where=where) from exc


def connect(uri: str, timeout: float) -> MilvusClient:
    """A client of ``uri``. pymilvus keeps one connection per URI in a process and pings it
    every 10 s; a server that counts those pings on an idle connection as too many (milvus-lite
    does, after a few) closes it, and the client's first reconnect can then fail on the closing
    transport ("Too many pings"). One more attempt opens a new one; a second failure stands."""
    try:
        return MilvusClient(uri, timeout=timeout)
    except MilvusException as exc:
        if exc.code != Status.CONNECT_FAILED:
            raise
        _log.warning("milvus %s: the connection failed (%s); reconnecting once", uri, exc)
        return MilvusClient(uri, timeout=timeout)


class Connection:
    """A client of one URI, connected at first use and again after ``close`` (an engine closed
    and then used again reads its collection on a new connection)."""

    def __init__(self, uri: str, timeout: float) -> None:
        self._uri, self._timeout = uri, timeout
        self._client: MilvusClient | None = None
        self._lock = threading.Lock()

    def client(self) -> MilvusClient:
        client = self._client
        if client is None:
            with self._lock:
                if self._client is None:
                    with milvus_errors(self._uri):
                        self._client = connect(self._uri, timeout=self._timeout)
                client = self._client
        return client

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()


def resolve_uri(folder: Path, uri: str) -> str:
    """A milvus-lite file named relative to the instance folder, or any other URI as given."""
    if uri.endswith(".db") and not Path(uri).is_absolute() and "://" not in uri:
        return str(folder / uri)
    return uri
