"""A scan request's fingerprint is remembered for the request object, and never goes stale:
``params`` is the one part of a frozen request that can change in place, and an entry whose
request's params changed is computed again (``backends.base.request_fingerprint``)."""

from __future__ import annotations

from backends.base import request_fingerprint
from rsc import Query, ScanRequest, fingerprint


def _request(**params: str | int) -> ScanRequest:
    return ScanRequest(
        obligation="o",
        rsc_id="tantivy.bm25",
        rsc_version="1.0.0",
        backend="tantivy",
        mode="bm25",
        query=Query(text="frozen records"),
        k=10,
        params=params,
    )


def test_the_remembered_fingerprint_is_the_requests_own() -> None:
    request = _request(nprobes=4)
    assert request_fingerprint(request) == fingerprint(request)
    assert request_fingerprint(request) == fingerprint(request)  # the remembered one


def test_params_changed_in_place_give_the_fresh_fingerprint() -> None:
    request = _request()
    before = request_fingerprint(request)
    request.params["access"] = "random"
    after = request_fingerprint(request)
    assert after != before
    assert after == fingerprint(request) == fingerprint(_request(access="random"))
    request.params["access"] = "sorted"
    assert request_fingerprint(request) == fingerprint(_request(access="sorted"))
    del request.params["access"]
    assert request_fingerprint(request) == before


def test_equal_requests_are_separate_entries_with_one_value() -> None:
    first, second = _request(nprobes=4), _request(nprobes=4)
    assert request_fingerprint(first) == request_fingerprint(second)
    second.params["nprobes"] = 8
    assert request_fingerprint(first) == fingerprint(_request(nprobes=4))
    assert request_fingerprint(second) == fingerprint(_request(nprobes=8))


def test_a_value_equal_in_python_but_not_in_json_gives_the_fresh_fingerprint() -> None:
    """``1 == True`` in Python, but not in the fingerprint's canonical JSON."""
    request = _request(exact=1)
    request_fingerprint(request)
    request.params["exact"] = True
    assert request_fingerprint(request) == fingerprint(request)
    request.params["exact"] = 1.0
    assert request_fingerprint(request) == fingerprint(request)
