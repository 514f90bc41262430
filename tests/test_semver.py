"""Version ranges mean what npm means: every case of the node-semver reference table
(fixtures/cases/semver_npm.json, written by node-semver's own satisfies()) answers alike."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rsc import Version, VersionRange, VersionRangeError
from tests.conftest import FIXTURES

TABLE: dict[str, Any] = json.loads((FIXTURES / "cases" / "semver_npm.json").read_text())


@pytest.mark.parametrize("case", TABLE["cases"], ids=[repr(c["range"]) for c in TABLE["cases"]])
def test_range_agrees_with_node_semver(case: dict[str, Any]) -> None:
    if not case["valid"]:
        with pytest.raises(VersionRangeError):
            VersionRange.parse(case["range"])
        return
    rng = VersionRange.parse(case["range"])
    assert [v for v in TABLE["versions"] if rng.contains(Version.parse(v))] == case["satisfied_by"]


@pytest.mark.parametrize(
    ("older", "npm"), [("==1.4.1", "=1.4.1"), (">=1.0.0,<2.0.0", ">=1.0.0 <2.0.0"), (">= 1.2, < 2", ">=1.2 <2")]
)
def test_comma_and_double_equals_keep_their_meaning(older: str, npm: str) -> None:
    for v in TABLE["versions"]:
        version = Version.parse(v)
        assert VersionRange.parse(older).contains(version) == VersionRange.parse(npm).contains(version)


def test_overlong_range_is_bad_input() -> None:
    with pytest.raises(VersionRangeError, match="at most 256"):
        VersionRange.parse("^1.0.0 || " * 100)
