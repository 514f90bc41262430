from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rsc import CanonicalError, canonical_json, fingerprint
from rsc.version import Version, VersionRange

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20,
)


def test_canonical_json_sorts_keys_and_strips_whitespace() -> None:
    assert canonical_json({"b": 1, "a": [True, None, "x"]}) == b'{"a":[true,null,"x"],"b":1}'


def test_floats_have_one_spelling() -> None:
    assert canonical_json(0.1 + 0.2) == canonical_json(0.3)
    assert canonical_json(-0.0) == b"0"
    assert canonical_json(2.0) == b"2"


def test_non_finite_and_sets_are_refused() -> None:
    with pytest.raises(CanonicalError, match="non-finite"):
        canonical_json({"x": float("nan")})
    with pytest.raises(CanonicalError, match="sets"):
        canonical_json({"x": {1, 2}})


def test_fingerprint_is_xxh3_128() -> None:
    fp = fingerprint({"a": 1})
    assert fp.startswith("xxh3_128:") and len(fp) == len("xxh3_128:") + 32


@given(json_values)
def test_key_order_never_changes_the_fingerprint(value: object) -> None:
    def reverse(v: object) -> object:
        if isinstance(v, dict):
            return {k: reverse(v[k]) for k in reversed(list(v))}
        if isinstance(v, list):
            return [reverse(x) for x in v]
        return v

    assert fingerprint(value) == fingerprint(reverse(value))


@pytest.mark.parametrize(
    ("text", "inside", "outside"),
    [
        (">=1.0.0,<2.0.0", "1.9.9", "2.0.0"),
        ("^1.2", "1.9.0", "2.0.0"),
        ("~1.2.3", "1.2.9", "1.3.0"),
        ("==1.0.0", "1.0.0", "1.0.1"),
        ("^0.3", "0.3.5", "0.4.0"),
    ],
)
def test_version_ranges(text: str, inside: str, outside: str) -> None:
    rng = VersionRange.parse(text)
    assert rng.contains(Version.parse(inside))
    assert not rng.contains(Version.parse(outside))


def test_star_range_admits_everything() -> None:
    assert VersionRange.parse("*").contains(Version.parse("9.9.9"))
