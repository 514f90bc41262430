"""Semantic versions and the version ranges a plan may pin a contract to.

A range is a comma-separated conjunction of comparators: ``>=1.2.0,<2.0.0``, ``==1.4.1``,
``^1.2`` (same major), ``~1.2.3`` (same minor), or ``*``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rsc.errors import VersionRangeError

_SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)$")
_PARTIAL = re.compile(r"^(0|[1-9]\d*)(?:\.(0|[1-9]\d*))?(?:\.(0|[1-9]\d*))?$")
_COMPARATOR = re.compile(r"^(>=|<=|==|>|<|\^|~|=)?\s*(\S+)$")


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
    bounds: tuple[tuple[str, Version], ...]

    @classmethod
    def parse(cls, text: str, *, where: str | None = None) -> VersionRange:
        stripped = text.strip()
        if stripped in ("", "*"):
            return cls("*", ())
        bounds: list[tuple[str, Version]] = []
        for part in stripped.split(","):
            match = _COMPARATOR.match(part.strip())
            partial = _PARTIAL.match(match[2]) if match else None
            if not match or not partial:
                raise VersionRangeError(f"{text!r} is not a version range", where=where)
            op = match[1] or "=="
            major = int(partial[1])
            minor = int(partial[2] or 0)
            patch = int(partial[3] or 0)
            low = Version(major, minor, patch)
            if op == "^":
                high = Version(major + 1, 0, 0) if major else Version(0, minor + 1, 0)
                bounds += [(">=", low), ("<", high)]
            elif op == "~":
                bounds += [(">=", low), ("<", Version(major, minor + 1, 0))]
            else:
                bounds.append(("==" if op == "=" else op, low))
        return cls(stripped, tuple(bounds))

    def contains(self, version: Version) -> bool:
        for op, bound in self.bounds:
            ok = {
                ">=": version >= bound,
                "<=": version <= bound,
                ">": version > bound,
                "<": version < bound,
                "==": version == bound,
            }[op]
            if not ok:
                return False
        return True

    def __str__(self) -> str:
        return self.text
