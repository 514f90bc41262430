"""Batch plans and index embedding on Ray: actors that each hold one opened engine, or the model.

Only ``race batch --ray`` and ``race index --ray`` (and code that asks for them) import this
module, and only this module imports Ray, which is the optional extra ``race[ray]``.

Batch: each actor opens its own engine from the index directory's path (so the path must be
readable at the same place on every node) and runs plans with the same ``race.evaluation.batch.run_line``
as a local batch, so a plan's record does not depend on where it ran. A task that fails inside
Ray — an actor that cannot open its engine, a worker that dies — is that plan's ``internal``
error record, never a lost line.

Indexing: each actor loads the embedding model once and embeds its share of every batch of
chunks (``RayEmbedder``); the rest of the build runs here, as a local build does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from backends.models.embedding import MiniLMEmbedder
from race.evaluation.batch import EngineOptions, LineResult, PlanLine, failure, line_result, run_line
from rsc import InputError

if TYPE_CHECKING:
    from backends.models.embedding import FloatArray

# A plan queued behind the running one keeps an actor busy while its result travels back.
_QUEUED_PER_ACTOR = 2


def connect(address: str) -> bool:
    """Join the Ray cluster at ``address`` (``local`` starts one on this machine; ``auto`` finds
    a running one). True when this call started Ray, and so should shut it down."""
    try:
        import ray
    except ImportError as exc:
        message = "Ray is not installed; install the extra: pip install 'race-engine[ray]'"
        raise InputError(message, where="--ray") from exc
    if ray.is_initialized():
        return False
    try:
        ray.init(address=None if address == "local" else address, include_dashboard=False)
    except (ConnectionError, ValueError) as exc:
        raise InputError(f"cannot join the Ray cluster at {address!r}: {exc}", where="--ray") from exc
    return True


def shutdown() -> None:
    import ray

    ray.shutdown()


class PlanRunner:
    """The body of one Ray actor: one engine, opened once, running one plan at a time."""

    def __init__(self, options: EngineOptions, plans: str) -> None:
        self.engine = options.open()
        self.plans = plans

    def run(self, item: PlanLine) -> LineResult:
        return anyio.run(partial(run_line, self.engine, item, plans=self.plans))


def run_batch_on_ray(
    items: Sequence[PlanLine],
    options: EngineOptions,
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


# -- distributed embedding -------------------------------------------------------------------


class EmbeddingWorker:
    """The body of one Ray actor: the embedding model, loaded once when the actor starts."""

    def __init__(self) -> None:
        self.embedder = MiniLMEmbedder()
        self.identity = self.embedder.identity

    def embed(self, texts: list[str]) -> tuple[Any, Any]:
        """The vectors of ``texts`` and the identity of the model that made them."""
        return self.embedder.embed(texts), self.identity


class RayEmbedder(MiniLMEmbedder):
    """The embedding model, with its vectors computed by up to ``workers`` Ray actors.

    It is the model (a ``MiniLMEmbedder``: its identity, token limit and tokenizer are this
    process's, so a build counts truncated text as a local build does); only ``embed`` runs
    elsewhere.

    Each call's texts are dealt to the actors by token count (longest first, each to the least
    loaded actor), every actor's share sorted by token length, and the vectors put back in the
    order given. The model embeds every text on its own tokens (never padded to another), so a
    vector's bytes do not depend on the texts it is batched with, and an index built with this
    embedder equals a local build. An actor whose model is another one (other weights) fails
    the build; so does a task Ray cannot run."""

    def __init__(self, workers: int) -> None:
        import ray
        from tokenizers import Tokenizer

        from backends.models.embedding import default_model_dir

        super().__init__()
        self._identity = self.identity
        folder = default_model_dir()
        assert folder is not None  # the identity above loaded the model from it
        self._tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        cpus = int(ray.cluster_resources().get("CPU", 1))
        self._pool = [ray.remote(num_cpus=1)(EmbeddingWorker).remote() for _ in range(max(1, min(workers, cpus)))]

    @property
    def workers(self) -> int:
        return len(self._pool)

    def shares(self, texts: Sequence[str]) -> list[list[int]]:
        """Each actor's texts (indices into ``texts``), balanced by token count, each share
        sorted by token length."""
        lengths = [len(e.ids) for e in self._tokenizer.encode_batch(list(texts))]
        shares: list[list[int]] = [[] for _ in self._pool]
        load = [0] * len(self._pool)
        for index in sorted(range(len(texts)), key=lambda i: (-lengths[i], i)):
            least = min(range(len(load)), key=lambda a: (load[a], a))
            shares[least].append(index)
            load[least] += lengths[index]
        return [sorted(share, key=lambda i: (lengths[i], i)) for share in shares]

    def embed(self, texts: Sequence[str]) -> FloatArray:
        import numpy as np
        import ray

        out = np.empty((len(texts), self._identity.dims), dtype=np.float32)
        work = [(share, actor) for share, actor in zip(self.shares(texts), self._pool, strict=True) if share]
        refs = [actor.embed.remote([texts[i] for i in share]) for share, actor in work]
        for (share, _), (vectors, identity) in zip(work, ray.get(refs), strict=True):
            if identity != self._identity:
                raise InputError(
                    f"a Ray worker embeds with {identity.name} ({identity.weights_sha256}), this process with "
                    f"{self._identity.name} ({self._identity.weights_sha256})",
                    where="--ray",
                )
            out[share] = vectors
        return out

    def close(self) -> None:
        import ray

        for actor in self._pool:
            ray.kill(actor)


def build_index_on_ray(
    corpus: Path, out: Path, report: Callable[[str, int, int], None] | None = None, *, address: str, workers: int = 0
) -> dict[str, str]:
    """``race index --ray``: ``race.indexing.indexing.build_index`` with the vector index's chunks
    embedded by ``workers`` Ray actors (0: one per CPU of the cluster); the same index content
    and LanceDB and graph generations as a local build (tantivy names its segments afresh in
    every build, local or not)."""
    from race.indexing.indexing import build_index

    if workers < 0:
        raise InputError(f"must be at least 0, not {workers}", where="--workers")
    joined = connect(address)
    try:
        embedder = RayEmbedder(workers or 1 << 16)
        try:
            return build_index(corpus, out, report, embedder=embedder)
        finally:
            embedder.close()
    finally:
        if joined:
            shutdown()
