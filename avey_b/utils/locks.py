"""One writer per output directory: the lock every job that writes into a directory over time takes
(``avey-b embed``, pretraining's run directory, a fine-tuning output directory).

:func:`exclusive_directory` holds an exclusive ``fcntl.flock`` on a lock file beside the directory,
``<parent>/.<name>.lock``, for as long as the job runs. Beside it, not in it: a run moved aside (``--overwrite``)
takes its directory's contents along but leaves the lock with the path, and the directory's own listing stays the
job's. The kernel drops the lock when the holder's process ends in any way (SIGKILL and power loss included), so
a killed job never leaves a stale lock; the file itself stays (deleting it would let a third job lock a file the
second has just opened). A second job on the same directory is refused at once with :class:`DirectoryBusyError`,
naming the directory and the holder's process id and command line, which the holder writes into the lock file.

``flock`` locks are advisory and local: they keep this library's jobs apart on one machine (and on file systems
that support ``flock``), not another program writing into the directory.

This module imports nothing else from the package.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import sys
from collections.abc import Iterator
from pathlib import Path


class DirectoryBusyError(RuntimeError):
    """Another job is writing into the directory (the message names the directory and the other process)."""


def lock_path(directory: str | os.PathLike) -> Path:
    """The lock file of ``directory``: ``<parent>/.<name>.lock``, the path resolved (symlinks, ``..``) first, so
    every spelling of one directory has one lock."""
    resolved = Path(directory).resolve()
    return resolved.with_name(f".{resolved.name}.lock")


def _holder(fd: int) -> str:
    os.lseek(fd, 0, os.SEEK_SET)
    text = os.read(fd, 4096).decode("utf-8", "replace").strip()
    return text or "a process that has not written its id yet"


@contextlib.contextmanager
def exclusive_directory(directory: str | os.PathLike, job: str) -> Iterator[Path]:
    """Hold ``directory``'s lock while the block runs (``job`` names the writer in the other job's error, e.g.
    ``"avey-b embed"``); yields the lock file's path. Raises :class:`DirectoryBusyError` at once when another process
    holds it. The directory itself is neither made nor required; its parent is made if missing."""
    path = lock_path(directory)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            raise DirectoryBusyError(
                f"{directory} is being written by another job ({_holder(fd)}); wait for it to end, stop it, or "
                f"choose another directory (lock: {path})") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()}: {job}: {' '.join(sys.argv)}\n".encode())
        yield path
    finally:
        os.close(fd)  # closing the only descriptor drops the flock
