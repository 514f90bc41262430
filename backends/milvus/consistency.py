"""A Milvus instance's consistency level as the snapshot semantics of its contracts.

Milvus reads at one of four levels (its ``consistency_level``): ``Strong`` sees every write
the collection acknowledged before the read; ``Bounded`` may miss writes inside the server's
staleness window; ``Session`` sees this client's own writes and may miss other clients' writes;
``Eventually`` guarantees nothing about recent writes. An instance declares its level (the
``race milvus --consistency`` manifest, or the catalog's ``consistency``); every read of the
instance (searches, counts, the generation's row digest) uses it, its contracts state it in
their description and ``snapshot.freshness``, and a scan below ``Strong`` carries a
``weak_consistency`` caveat gap: the answer is of the rows the server had applied.
"""

from __future__ import annotations

import re
from typing import Final, Literal

from rsc import Contract, InputError

Consistency = Literal["Strong", "Bounded", "Session", "Eventually"]
LEVELS: Final[tuple[Consistency, ...]] = ("Strong", "Bounded", "Session", "Eventually")
STRONG: Final[Consistency] = "Strong"

FRESHNESS: Final[dict[str, str]] = {
    "Strong": (
        "Strong consistency: every write the collection acknowledged before the scan started is seen; a write that "
        "lands while a scan runs moves the generation and the scan is refused (snapshot_moved) rather than answered "
        "from a mix"
    ),
    "Bounded": (
        "Bounded consistency: a scan sees the writes the server applied up to its staleness window (a few seconds "
        "by default) and may miss more recent ones; the generation is read at the same level, so it names the rows "
        "the scan searched; each scan carries a weak_consistency caveat"
    ),
    "Session": (
        "Session consistency: a scan sees this client's own writes and may miss other clients' recent ones; the "
        "generation is read at the same level; each scan carries a weak_consistency caveat"
    ),
    "Eventually": (
        "Eventual consistency: a scan may miss any recent write; the generation is read at the same level, so it "
        "names the rows the scan searched; each scan carries a weak_consistency caveat"
    ),
}
"""The contract's ``snapshot.freshness`` at each level."""

_SENTENCE: Final = re.compile(r"Read at consistency level [A-Za-z]+(?: \([^)]*\))?\.")


def level_of(value: object, *, where: str) -> Consistency:
    """A stated consistency level, or bad input naming ``where``."""
    for level in LEVELS:
        if value == level:
            return level
    raise InputError(f"consistency level {value!r} is not one of {list(LEVELS)}", where=where)


def with_consistency(contract: Contract, level: Consistency) -> Contract:
    """``contract`` stating reads at ``level``: its description's consistency sentence and its
    snapshot freshness. Idempotent; at ``Strong`` a shipped contract is returned unchanged."""
    said = f"Read at consistency level {level}."
    if level != STRONG:
        said = f"Read at consistency level {level} (a scan may miss recent writes)."
    description = contract.description
    description = _SENTENCE.sub(said, description) if _SENTENCE.search(description) else f"{description} {said}"
    snapshot = contract.snapshot.model_copy(update={"freshness": FRESHNESS[level]})
    if description == contract.description and snapshot == contract.snapshot:
        return contract
    return contract.model_copy(update={"description": description, "snapshot": snapshot})


def caveat_detail(level: Consistency, collection: str) -> str:
    """The ``weak_consistency`` gap's one line for a scan of ``collection`` at ``level``."""
    return (
        f"collection {collection!r} was read at consistency level {level}: rows written shortly before the scan "
        "may be missing from its answer (and from its generation)"
    )
