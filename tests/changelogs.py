"""The changelog fixture corpus (fixtures/changelogs, real Debian changelog entries) read
directly, without RACE: each document's front matter, its edges, and lexical index builds."""

from __future__ import annotations

import datetime as dt
import email.utils
import json
from pathlib import Path
from typing import Any

import yaml

from race.indexing.indexing import build_index
from tests.conftest import FIXTURES

CHANGELOGS = FIXTURES / "changelogs"


def documents() -> dict[str, dict[str, Any]]:
    """Doc id -> its front matter (every value a string) and ``path``."""
    docs: dict[str, dict[str, Any]] = {}
    for path in sorted((CHANGELOGS / "entries").rglob("*.md")):
        text = path.read_text(encoding="utf-8")
        front = yaml.safe_load(text.split("---\n")[1])
        docs[front["id"]] = {**front, "path": path, "body": text.split("---\n", 2)[2]}
    return docs


def edges(relation: str) -> list[tuple[str, str]]:
    lines = (CHANGELOGS / "edges.jsonl").read_text(encoding="utf-8").splitlines()
    found = [json.loads(line) for line in lines if line.strip()]
    return [(e["src"], e["dst"]) for e in found if e["relation"] == relation]


def utc_day(rfc2822: str) -> str:
    """The UTC calendar day of an RFC 2822 date, as the schema's datetime type stores it."""
    return email.utils.parsedate_to_datetime(rfc2822).astimezone(dt.UTC).date().isoformat()


def build(out: Path, corpus: Path = CHANGELOGS) -> Path:
    build_index(corpus, out, vectors=False)
    return out
