"""What an obligation's ``collapse`` option leaves in the item it keeps: every copy it
collapsed, by key and custody, so that nothing is dropped silently."""

from __future__ import annotations

from typing import Literal

from rsc import EvidenceStatus, Record


class CollapsedCopy(Record):
    """One collapsed copy: which evidence unit it was, where it was ranked, and its custody."""

    key: str
    """The copy's evidence key."""
    doc_id: str
    """Its document."""
    rank: int
    """Its position in the ranking that was collapsed (1 is first)."""
    status: EvidenceStatus
    """Its evidence status."""
    chunk_id: str
    """Its chunk."""
    source_path: str | None
    """Custody of its first hit, as the hit gives it (``null`` where its source has none)."""
    line_start: int | None
    """Its first line in the source file."""
    line_end: int | None
    """Its last line in the source file."""
    source_hash: str | None
    """``sha256:<hex>`` of its source file."""


class Collapsed(Record):
    """The copies an item stands for: those with its text (``content``, ``group`` the sha256
    of that text) or of its origin component (``origin``, ``group`` the origin's id)."""

    by: Literal["content", "origin"]
    """``content`` (identical text) or ``origin`` (one origin component)."""
    group: str
    """The sha256 of the text, or the origin's id."""
    copies: tuple[CollapsedCopy, ...]
    """Every other member of the group, in rank order."""
