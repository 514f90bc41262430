"""Every failure RACE reports, as one tree.

::

    RaceError                      base; ``where`` names the place (file, field, node id)
    ├── InputError                 the caller's input is wrong; CLI exit status 2
    │   ├── PlanError              a logical plan does not parse or validate
    │   │   ├── PlanCycleError     the operator graph has a cycle
    │   │   ├── DanglingReference  an id that resolves to nothing
    │   │   ├── UnknownFilterField a filter names a field no contract knows
    │   │   └── BoundExceeded      the plan is larger than its declared bounds allow
    │   ├── ContractError          an RSC document does not parse or validate
    │   ├── VersionRangeError      no contract version inside the plan's pinned range
    │   ├── IndexMissingError      the index directory is absent or incomplete
    │   └── CorpusError            a corpus file does not parse
    ├── ReplayError                exact replay cannot proceed; fails closed, exit 2
    │   ├── ArtifactMissing        a retained response is absent
    │   └── ArtifactTampered       a retained response's hash does not match
    ├── ModelMissingError          the embedding model is not installed
    ├── StorageError               the disk refused a write (full, over quota, read-only)
    ├── CanonicalError             a value has no canonical JSON form
    ├── EngineClosed               the engine closed while a ``*_sync`` call waited on its loop
    └── BackendError               a backend failed; becomes a gap, never an empty result
        ├── BackendTimeout         the backend did not answer within its deadline
        ├── BackendUnavailable     the backend refused, dropped or garbled the answer
        └── SnapshotMoved          the snapshot a run was planned with cannot be read any more
"""

from __future__ import annotations


class RaceError(Exception):
    """Base of every RACE error. ``where`` is the place the error is about."""

    def __init__(self, message: str, *, where: str | None = None) -> None:
        self.where = where
        super().__init__(f"{where}: {message}" if where else message)


class InputError(RaceError):
    pass


class PlanError(InputError):
    pass


class PlanCycleError(PlanError):
    pass


class DanglingReference(PlanError):
    pass


class UnknownFilterField(PlanError):
    pass


class BoundExceeded(PlanError):
    pass


class ContractError(InputError):
    pass


class VersionRangeError(InputError):
    pass


class IndexMissingError(InputError):
    pass


class CorpusError(InputError):
    pass


class ReplayError(RaceError):
    pass


class ArtifactMissing(ReplayError):
    pass


class ArtifactTampered(ReplayError):
    pass


class ModelMissingError(RaceError):
    pass


class StorageError(RaceError):
    pass


class CanonicalError(RaceError):
    pass


class EngineClosed(RaceError):
    pass


class BackendError(RaceError):
    pass


class BackendTimeout(BackendError):
    pass


class BackendUnavailable(BackendError):
    pass


class SnapshotMoved(BackendError):
    """The generation a run was planned with (``planned``) cannot be pinned or has moved to
    ``current``: the leg is refused rather than answered from another snapshot."""

    def __init__(
        self, message: str, *, where: str | None = None, planned: str = "unknown", current: str = "unknown"
    ) -> None:
        self.planned = planned
        self.current = current
        super().__init__(message, where=where)


def most_specific(exc: BaseException) -> BaseException:
    """The one error an exception group stands for: its most specific RACE error (the deepest
    in this tree, the first of equals), or its first leaf when it holds none. Task groups wrap
    what failed inside them; the CLI and the API report the error itself."""
    leaves = list(_leaves(exc))
    ours = [e for e in leaves if isinstance(e, RaceError)]
    if ours:
        return max(ours, key=lambda e: len(type(e).__mro__))
    return leaves[0] if leaves else exc


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]
