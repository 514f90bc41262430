"""The injector itself: it delegates everything but the faulted scans, applies each fault
exactly as described, and only on the call it names."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable

import anyio
import pytest

from backends import Adapter
from backends.base import request_fingerprint
from race.engine import Engine
from rsc import Filter, Query, ScanRequest, ScanResult
from tests.faults.injector import (
    Fault,
    FaultyAdapter,
    duplicate_hits,
    inf_score,
    nan_score,
    negative_score,
    nth_call,
    out_of_filter,
    raise_task,
    raise_thread,
    truncated_custody,
)

pytestmark = pytest.mark.anyio


def _request(adapter: Adapter, *, pushed: tuple[Filter, ...] = ()) -> ScanRequest:
    contract = next(c for c in adapter.contracts() if c.rsc_id == "tantivy.bm25")
    return ScanRequest(
        obligation="o",
        rsc_id=contract.rsc_id,
        rsc_version=contract.version,
        backend=adapter.backend,
        mode="bm25",
        query=Query(text="partition stall raft election"),
        k=5,
        pushed=pushed,
    )


@pytest.fixture
def tantivy(session_engine: Engine) -> Adapter:
    return session_engine.adapters["tantivy"]


def test_everything_but_scan_is_the_real_adapter(session_engine: Engine) -> None:
    for name, real in session_engine.adapters.items():
        faulty = FaultyAdapter(real, {"o": raise_task(RuntimeError("x"))})
        assert faulty.backend == real.backend == name
        assert faulty.contracts() == real.contracts()
        assert faulty.identity == real.identity
        assert faulty.generation() == real.generation()
        assert faulty.statistics() == real.statistics()
        assert faulty.models() == real.models()
    graph = FaultyAdapter(session_engine.adapters["graph"])
    assert graph.origins(["ksa-2024-003"]) == session_engine.adapters["graph"].origins(["ksa-2024-003"])  # type: ignore[attr-defined]


async def test_other_obligations_and_other_calls_answer_normally(tantivy: Adapter) -> None:
    request = _request(tantivy)
    real = await tantivy.scan(request)
    faulty = FaultyAdapter(tantivy, {"o": nth_call(2, raise_task(KeyError("second")))})
    assert await faulty.scan(request) == real
    with pytest.raises(KeyError, match="second"):
        await faulty.scan(request)
    assert await faulty.scan(request) == real
    other = request.model_copy(update={"obligation": "p"})
    assert (await faulty.scan(other)).hits
    assert faulty.calls == {"o": 3, "p": 1}
    assert [(i.obligation, i.call) for i in faulty.injected] == [("o", 2)]


async def test_raise_thread_raises_in_a_worker_thread(tantivy: Adapter, monkeypatch: pytest.MonkeyPatch) -> None:
    import tests.faults.injector as injector

    threads: list[str] = []
    original = injector._raise_copy

    def recorded(exc: Exception) -> None:
        threads.append(threading.current_thread().name)
        original(exc)

    monkeypatch.setattr(injector, "_raise_copy", recorded)
    with pytest.raises(ZeroDivisionError):
        await FaultyAdapter(tantivy, {"o": raise_thread(ZeroDivisionError("z"))}).scan(_request(tantivy))
    assert threads and threads[0] != threading.main_thread().name


MALFORMED_CHECKS: list[tuple[Fault, Callable[[ScanResult, ScanResult, ScanRequest], bool]]] = [
    (nan_score(), lambda real, bad, req: math.isnan(bad.hits[0].custody.score)),
    (inf_score(), lambda real, bad, req: math.isinf(bad.hits[0].custody.score)),
    (negative_score(), lambda real, bad, req: bad.hits[0].custody.score < 0),
    (
        duplicate_hits(),
        lambda real, bad, req: len(bad.hits) == len(real.hits) + 1 and bad.hits[-1].key == real.hits[0].key,
    ),
    (
        truncated_custody(),
        lambda real, bad, req: (
            bad.hits[0].custody.request != request_fingerprint(req)
            and all(h.custody.request == request_fingerprint(req) for h in bad.hits[1:])
        ),
    ),
    (
        out_of_filter(),
        lambda real, bad, req: (
            not all(f.matches(bad.hits[0].metadata) for f in req.pushed)
            and all(f.matches(h.metadata) for f in req.pushed for h in bad.hits[1:])
        ),
    ),
]


@pytest.mark.parametrize(("fault", "check"), [pytest.param(f, c, id=f.name) for f, c in MALFORMED_CHECKS])
async def test_a_malformed_answer_damages_exactly_one_hit(
    tantivy: Adapter, fault: Fault, check: Callable[[ScanResult, ScanResult, ScanRequest], bool]
) -> None:
    request = _request(tantivy, pushed=(Filter(field="authority", value="official"),))
    real: ScanResult = await tantivy.scan(request)
    faulty = FaultyAdapter(tantivy, {"o": fault})
    bad = await faulty.scan(request)
    assert len(real.hits) >= 2
    assert check(real, bad, request)
    assert bad.hits[1 : len(real.hits)] == real.hits[1:]
    (injection,) = faulty.injected
    assert injection.key == real.hits[0].key and injection.fingerprint == request_fingerprint(request)


async def test_a_fault_that_cannot_apply_is_recorded_not_injected(tantivy: Adapter) -> None:
    faulty = FaultyAdapter(tantivy, {"o": out_of_filter()})
    request = _request(tantivy)
    assert await faulty.scan(request) == await tantivy.scan(request)
    assert faulty.injected == [] and len(faulty.not_applied) == 1


def test_late_and_hanging_faults_are_timed_by_anyio(tantivy: Adapter) -> None:
    from tests.faults.injector import hang_async, late_answer

    async def main() -> tuple[float, bool]:
        faulty = FaultyAdapter(tantivy, {"o": late_answer(0.2)})
        started = anyio.current_time()
        answer = await faulty.scan(_request(tantivy))
        late = anyio.current_time() - started
        with anyio.move_on_after(0.1) as scope:
            await FaultyAdapter(tantivy, {"o": hang_async()}).scan(_request(tantivy))
        return late if answer.hits else -1.0, scope.cancelled_caught

    late, cut = anyio.run(main)
    assert late >= 0.2 and cut
