"""Ray for indexing and batches: joining and leaving the cluster, and index embedding on Ray
actors that each hold the model.

Only ``race batch --ray`` and ``race index --ray`` (and code that asks for them) import this
module and ``race.evaluation.batch_ray``, the only modules that import Ray, which is the
optional extra ``race[ray]``.

Indexing: each actor loads the embedding model once and embeds its share of every batch of
chunks (``RayEmbedder``); the rest of the build runs here, as a local build does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backends.models.embedding import MiniLMEmbedder
from rsc import InputError

if TYPE_CHECKING:
    from backends.models.embedding import FloatArray

# A plan queued behind the running one keeps an actor busy while its result travels back.
_QUEUED_PER_ACTOR = 2


def connect(address: str) -> bool:
    """Join the Ray cluster at ``address`` (``local`` starts one on this machine; ``auto`` finds
    a running one). True when this call started Ray, and so should shut it down."""
    from race.extras import require

    ray = require("ray", feature="--ray", where="--ray")
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
