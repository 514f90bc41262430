"""Semantic versions and the version ranges a plan may pin a contract to.

A range has npm's meaning (node-semver; Cargo's for the forms both have), evaluated by
``semantic_version.NpmSpec``: ``^0.0.3`` (only 0.0.3), ``^1.2`` (>=1.2.0 <2.0.0), ``~1``
(1.x), ``=1.2`` and ``1.2`` (1.2.x), ``>1.2`` (>=1.3.0), ``<=1.2`` (<1.3.0), ``1.x``,
``1.2.3 - 2.3.4``, space-separated conjunctions, ``||`` alternatives, ``*``. A comma is a
conjunction too (Cargo's ``>=1.2, <2``), ``==`` means ``=`` and ``~>`` means ``~``. The answers are checked
against node-semver's own in fixtures/cases/semver_npm.json.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import semantic_version

from rsc.errors import VersionRangeError

_SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)$")
# ``==1.4.1`` (this module's own older spelling) is npm's ``=1.4.1``; ``>= 1.2`` is ``>=1.2``.
_DOUBLE_EQUALS = re.compile(r"(?<![<>=!])==")
_OPERATOR_SPACE = re.compile(r"([<>=^~])\s+")
_MAX_RANGE_CHARS = 256


@dataclass(frozen=True, order=True)
class Version:
    major: int
    minor: int
    patch: int

    @classmethod
    def parse(cls, text: str, *, where: str | None = None) -> Version:
        match = _SEMVER.match(text.strip())
        if not match:
            raise VersionRangeError(f"{text!r} is not a semantic version MAJOR.MINOR.PATCH", where=where)
        return cls(int(match[1]), int(match[2]), int(match[3]))

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"


def is_semver(text: str) -> bool:
    return bool(_SEMVER.match(text))


@dataclass(frozen=True)
class VersionRange:
    text: str
    spec: semantic_version.NpmSpec

    @classmethod
    def parse(cls, text: str, *, where: str | None = None) -> VersionRange:
        stripped = text.strip()
        if len(stripped) > _MAX_RANGE_CHARS:
            raise VersionRangeError(
                f"version range of {len(stripped)} characters (at most {_MAX_RANGE_CHARS})", where=where
            )
        npm = _OPERATOR_SPACE.sub(r"\1", _DOUBLE_EQUALS.sub("=", stripped.replace(",", " ").replace("~>", "~")))
        npm = " || ".join(" ".join(alternative.split()) for alternative in npm.split("||"))
        try:
            spec = semantic_version.NpmSpec(npm or "*")
        except ValueError:
            raise VersionRangeError(f"{text!r} is not a version range", where=where) from None
        return cls(stripped or "*", spec)

    def contains(self, version: Version) -> bool:
        return semantic_version.Version(major=version.major, minor=version.minor, patch=version.patch) in self.spec

    def __str__(self) -> str:
        return self.text
