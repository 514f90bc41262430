"""A build's staging beside its target: what a killed build left there, and a disk that
refuses a write as one short error.

A build writes ``.NAME.building-PID`` beside ``NAME`` and moves it in only when every backend
succeeded (an update copies the index there first); a build killed part-way leaves its
staging and, between the two moves, the previous index aside as ``.NAME.previous-PID``: the
next build or update of the same target removes the one and puts the other back.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
from pathlib import Path

from rsc import StorageError

DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EFBIG})
"""What the disk answers when it cannot take a write: full, over quota, read-only, failing, too large."""


_RUST_OS_ERROR = re.compile(r"\(os error (\d+)\)")
"""The errno of an ``std::io::Error`` as a Rust library's message shows it."""


class CopyFailed(Exception):
    """A file the index copy could not write: raised out of ``copytree`` at once (an ``OSError``
    would be collected, and the copy go on to fail on every remaining file of a full disk)."""

    def __init__(self, error: OSError, target: str) -> None:
        super().__init__(str(error))
        self.error, self.target = error, target


def copy_file(src: str, dst: str) -> object:
    try:
        return shutil.copy2(src, dst)
    except OSError as exc:
        raise CopyFailed(exc, dst) from exc


def disk_error(exc: BaseException, out: Path, staging: Path, doing: str) -> StorageError | None:
    """``exc`` as one short ``StorageError`` line naming the index, the cause and the file when
    the disk refused a write (the partial index in ``staging`` is already removed); else ``None``."""
    error: BaseException = exc
    target = ""
    if isinstance(exc, CopyFailed):
        error, target = exc.error, exc.target
    elif isinstance(exc, shutil.Error) and exc.args and isinstance(exc.args[0], list) and exc.args[0]:
        # copytree's list of (source, target, reason) for every file it failed on: the first says why.
        reason = str(exc.args[0][0][2])
        return StorageError(
            f"cannot {doing}: {reason[:200]} ({len(exc.args[0])} files failed); removed the partial index {staging}",
            where=str(out),
        )
    refused = [int(n) for n in _RUST_OS_ERROR.findall(str(error)) if int(n) in DISK_ERRNOS]
    if isinstance(error, ValueError | RuntimeError) and refused:
        # tantivy raises a ValueError for the operating system's refusal ("An IO error
        # occurred: 'No space left on device (os error 28)'"), LanceDB a RuntimeError.
        error = OSError(refused[0], os.strerror(refused[0]))
    elif isinstance(error, ValueError) and "index writer was killed" in str(error) and "io::Error" in str(error):
        # ... or, when a writer thread met it first, only that the thread died of one.
        free = shutil.disk_usage(staging.parent).free if staging.parent.exists() else 0
        return StorageError(
            f"cannot {doing}: the tantivy index writer stopped on an I/O error ({free / 2**20:.1f} MiB free "
            f"on that disk, or a file size limit); removed the partial index {staging}",
            where=str(out),
        )
    if not isinstance(error, OSError) or (error.errno not in DISK_ERRNOS and not isinstance(exc, CopyFailed)):
        return None
    cause = error.strerror or type(error).__name__
    code = errno.errorcode.get(error.errno or 0, str(error.errno))
    where = str(Path(target).relative_to(staging)) if target and Path(target).is_relative_to(staging) else ""
    at = f" writing {where}" if where else ""
    return StorageError(f"cannot {doing}: {cause} ({code}){at}; removed the partial index {staging}", where=str(out))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clear_dead_builds(out: Path) -> list[Path]:
    """Remove what a killed ``race index`` of ``out`` left beside it: its ``.NAME.building-PID``
    directory, and put back the previous index (``.NAME.previous-PID``) if it was killed between
    moving that away and moving the new one in. A directory of a process still running is left
    alone. The paths removed or restored."""
    done: list[Path] = []
    for kind in ("previous", "building"):
        for path in sorted(out.parent.glob(f".{out.name}.{kind}-*")):
            pid = path.name.rsplit("-", 1)[1]
            if not pid.isdigit() or _pid_alive(int(pid)):
                continue
            if kind == "previous" and not out.exists():
                path.rename(out)
            else:
                shutil.rmtree(path, ignore_errors=True)
            done.append(path)
    return done
