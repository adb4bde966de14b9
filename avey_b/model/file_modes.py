"""The mode of the files the library writes: the one a new file gets under the process's umask.

Standard library only, so that light modules (records, the option parsers) use it without importing torch.
"""

from __future__ import annotations

import os


def honour_umask(*paths) -> None:
    """Give each file the mode a new file gets under the process's umask (0644 under the usual 022). safetensors'
    ``save_file`` and ``tempfile.mkstemp`` (atomic writes) leave 0600, which a service account or a colleague reading
    the model or the results cannot open."""
    mode = 0o666 & ~_umask()
    for path in paths:
        os.chmod(path, mode)


def _umask() -> int:
    """The process's umask, read without changing it where Linux shows it (``/proc/self/status``); elsewhere set and
    set back at once (``os.umask`` only reads it by setting it)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            return next(int(line.split()[1], 8) for line in f if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError, IndexError):
        old = os.umask(0o022)
        os.umask(old)
        return old
