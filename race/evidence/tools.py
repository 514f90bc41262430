"""The evidence tools as methods of the engine: ``Engine.context`` and ``Engine.cite``.

Neither reads a backend or the engine's state, and neither writes anything: a packet and a
citation report exist in the caller's hands only (their handles never reach a receipt, a
cache or a retained artifact)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported at the first packet or citation, not with the engine
    from race.evidence.cite import CiteReport
    from race.evidence.packet import Packet
    from race.receipt import Receipt

DEFAULT_TOKENIZER = "all-MiniLM-L6-v2"
"""``race.evidence.packet.DEFAULT_TOKENIZER``, here so that the engine's class needs no packet code."""


def _corpus(corpus: Path | None) -> Path:
    if corpus is None:
        from race.indexing.bundled import BUNDLED_CORPUS

        return BUNDLED_CORPUS
    return corpus


class EvidenceTools:
    """Context packets of receipts, and answers' citations checked against them."""

    @staticmethod
    def context(
        receipt: Receipt,
        corpus: Path | None = None,
        *,
        max_chars: int,
        max_tokens: int | None = None,
        tokenizer: str = DEFAULT_TOKENIZER,
    ) -> Packet:
        """The context packet of ``receipt`` over ``corpus`` (default: the bundled corpus) within
        the budgets, its passages numbered 1 to n: ``race context --json``
        (``race.evidence.packet.build_packet``)."""
        from race.evidence.packet import build_packet

        return build_packet(receipt, _corpus(corpus), max_chars=max_chars, max_tokens=max_tokens, tokenizer=tokenizer)

    @staticmethod
    def cite(
        packet: Packet | Path,
        answer: str | Path,
        corpus: Path | None = None,
        *,
        packet_fingerprint: str | None = None,
    ) -> CiteReport:
        """Every handle ``answer`` (its text, or a file) cites, resolved through ``packet`` (or a
        packet file) and read again from ``corpus`` (default: the bundled corpus), and the
        sentences that cite nothing: ``race cite --json`` (``race.evidence.cite.cite_answer``).
        With ``packet_fingerprint``, a packet whose fingerprint differs is refused (``InputError``)."""
        from race.evidence.cite import cite_answer, load_answer, load_packet

        where = str(packet) if isinstance(packet, Path) else "packet"
        loaded = load_packet(packet) if isinstance(packet, Path) else packet
        text = load_answer(answer) if isinstance(answer, Path) else answer
        return cite_answer(loaded, text, _corpus(corpus), packet_fingerprint=packet_fingerprint, where=where)
