"""Batch plans on Ray (``race batch --ray``): actors that each hold one opened engine.

Each actor opens its own engine from the index directory's path (so the path must be
readable at the same place on every node) and runs plans with the same ``race.evaluation.batch.run_line``
as a local batch, so a plan's record does not depend on where it ran. A task that fails inside
Ray — an actor that cannot open its engine, a worker that dies — is that plan's ``internal``
error record, never a lost line. Joining the cluster is ``race.indexing.distributed``'s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any

import anyio

from race.evaluation.batch import EngineSource, LineResult, PlanLine, failure, line_result, run_line

# A plan queued behind the running one keeps an actor busy while its result travels back.
_QUEUED_PER_ACTOR = 2


class PlanRunner:
    """The body of one Ray actor: one engine, opened once, running one plan at a time."""

    def __init__(self, options: EngineSource, plans: str) -> None:
        self.engine = options.open()
        self.plans = plans

    def run(self, item: PlanLine) -> LineResult:
        return anyio.run(partial(run_line, self.engine, item, plans=self.plans))


def run_batch_on_ray(
    items: Sequence[PlanLine],
    options: EngineSource,
    *,
    plans: str,
    actors: int,
    emit: Callable[[LineResult], None],
) -> int:
    """Run ``items`` on up to ``actors`` Ray actors (no more than the cluster has CPUs) and
    ``emit`` every record in ``items`` order. Returns the number of actors used."""
    import ray

    if not items:
        return 0
    cpus = int(ray.cluster_resources().get("CPU", 1))
    count = max(1, min(actors, cpus, len(items)))
    runner = ray.remote(num_cpus=1, max_restarts=1, max_task_retries=1)(PlanRunner)
    pool = [runner.remote(options, plans) for _ in range(count)]
    todo: Iterator[int] = iter(range(len(items)))
    pending: dict[Any, tuple[int, int]] = {}
    done: dict[int, LineResult] = {}
    next_out = 0

    def submit(actor: int) -> None:
        index = next(todo, None)
        if index is not None:
            pending[pool[actor].run.remote(items[index])] = (index, actor)

    try:
        for actor in range(count):
            for _ in range(_QUEUED_PER_ACTOR):
                submit(actor)
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            index, actor = pending.pop(ready[0])
            try:
                result: LineResult = ray.get(ready[0])
            except Exception as exc:
                result = line_result(items[index], failure(exc))
            done[index] = result
            submit(actor)
            while next_out in done:
                emit(done.pop(next_out))
                next_out += 1
    finally:
        for actor_handle in pool:
            ray.kill(actor_handle)
    return count
