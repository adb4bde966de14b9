"""Where session records (:mod:`avey_b.inference.sessions`) are kept beyond one process's memory, so that a restart
or another replica resumes a document exactly: a local directory (:class:`DirectoryStore`: one process, or several
on one machine) or a Redis / Valkey server (:class:`RedisStore`: a fleet). :func:`open_store` makes one from
``--state-store``'s value.

Every store keeps, per session id, one record and its version, and writes compare-and-set: :meth:`write` with the
version the writer read (0: the session must not exist) fails, returning False, when another writer got there
first — so two replicas changing one session never interleave, and the second is told (a 409). A store that does
not answer raises :class:`StoreUnavailable` naming it: a request then fails with that message (503), never with a
vector computed from a state that may be stale. Records expire ``ttl_s`` seconds after their last write or read.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import math
import os
import time
import urllib.parse
from pathlib import Path

from avey_b.inference.sessions import RecordError, header
from avey_b.utils.records import write_bytes_atomic


class StoreUnavailable(RuntimeError):
    """The state store did not answer (the message names it and the error)."""


class DirectoryStore:
    """Records as files ``<path>/<digest of the id>.session`` (written atomically; a lock file per session makes
    compare-and-set hold across processes), expired ``ttl_s`` seconds after their last write or read."""

    def __init__(self, path: str | os.PathLike, ttl_s: float):
        self.path, self.ttl_s = Path(path), ttl_s
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise ValueError(f"--state-store {path}: cannot make the directory ({error})") from None

    def __str__(self) -> str:
        return f"the directory {self.path}"

    def _file(self, key: str) -> Path:
        return self.path / (hashlib.sha256(key.encode()).hexdigest()[:40] + ".session")

    @contextlib.contextmanager
    def _locked(self, key: str):
        with open(self._file(key).with_suffix(".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _fresh(self, file: Path) -> bool:
        """Whether ``file`` exists and has not expired (an expired one is removed)."""
        try:
            age = time.time() - file.stat().st_mtime
        except FileNotFoundError:
            return False
        if age > self.ttl_s:
            file.unlink(missing_ok=True)
            return False
        return True

    def read(self, key: str) -> bytes | None:
        file = self._file(key)
        if not self._fresh(file):
            return None
        try:
            data = file.read_bytes()
            os.utime(file)
        except FileNotFoundError:
            return None
        return data

    def _meta(self, file: Path) -> dict[str, str] | None:
        """A fresh record's metadata, from its header (None: no such record; a damaged one raises
        :class:`RecordError`)."""
        if not self._fresh(file):
            return None
        try:
            with open(file, "rb") as f:
                size = f.read(8)
                return header(size + f.read(int.from_bytes(size, "little")))
        except FileNotFoundError:
            return None

    def version(self, key: str) -> int | None:
        try:
            meta = self._meta(self._file(key))
        except RecordError:
            return -1  # a damaged or foreign record: read() hands it to the check that names the problem
        return None if meta is None else int(meta["version"])

    def write(self, key: str, record: bytes, version: int, expected: int) -> bool:
        with self._locked(key):
            held = self.version(key) or 0
            if held != expected:
                return False
            write_bytes_atomic(self._file(key), lambda f: f.write(record))
        return True

    def delete(self, key: str) -> bool:
        with self._locked(key):
            file = self._file(key)
            found = self._fresh(file)
            file.unlink(missing_ok=True)
        file.with_suffix(".lock").unlink(missing_ok=True)
        return found

    def metas(self) -> list[dict[str, str]]:
        """The metadata of every record held (its header's: :func:`~avey_b.inference.sessions.header`); a damaged
        record is left out."""
        out = []
        for file in sorted(self.path.glob("*.session")):
            with contextlib.suppress(OSError, RecordError):
                if (meta := self._meta(file)) is not None:
                    out.append(meta)
        return out


class RedisStore:
    """Records in a Redis or Valkey server at ``url`` (``redis://host:port/db``, ``rediss://`` with TLS,
    ``unix:///path``): per session a hash ``avey-b:session:<id>`` of its ``version`` and ``record``, written in a
    ``WATCH`` / ``MULTI`` transaction (compare-and-set), expiring ``ttl_s`` seconds after its last write or read.
    Each call waits at most ``timeout_s`` seconds for the server."""

    PREFIX = "avey-b:session:"

    def __init__(self, url: str, ttl_s: float, timeout_s: float = 2.0):
        try:
            import redis
        except ImportError:
            raise SystemExit("--state-store redis://... needs the Redis client: pip install 'avey-b[sessions]'") \
                from None
        self.url, self.ttl_s, self.redis = url, ttl_s, redis
        self._seconds = max(1, math.ceil(ttl_s))  # Redis expires in whole seconds (0 would delete at once)
        self.client = redis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)

    def __str__(self) -> str:
        where = urllib.parse.urlsplit(self.url)
        shown = where._replace(netloc=where.netloc.rpartition("@")[2]).geturl()  # no password in a message
        return f"the Redis server {shown}"

    @contextlib.contextmanager
    def _answering(self):
        try:
            yield
        except self.redis.exceptions.WatchError:
            raise
        except self.redis.exceptions.RedisError as error:
            raise StoreUnavailable(f"the state store ({self}) did not answer: {type(error).__name__}: {error}") \
                from None

    def ping(self) -> None:
        """Raise :class:`StoreUnavailable` unless the server answers."""
        with self._answering():
            self.client.ping()

    def read(self, key: str) -> bytes | None:
        with self._answering():
            pipe = self.client.pipeline()
            pipe.hget(self.PREFIX + key, "record")
            pipe.expire(self.PREFIX + key, self._seconds)
            record, _ = pipe.execute()
        return record

    def version(self, key: str) -> int | None:
        with self._answering():
            held = self.client.hget(self.PREFIX + key, "version")
        return None if held is None else int(held)

    def write(self, key: str, record: bytes, version: int, expected: int) -> bool:
        name = self.PREFIX + key
        with self._answering(), self.client.pipeline() as pipe:
            try:
                pipe.watch(name)
                held = pipe.hget(name, "version")
                if (0 if held is None else int(held)) != expected:
                    return False
                pipe.multi()
                pipe.hset(name, mapping={"version": version, "record": record, "meta": json.dumps(header(record))})
                pipe.expire(name, self._seconds)
                pipe.execute()
            except self.redis.exceptions.WatchError:
                return False
        return True

    def delete(self, key: str) -> bool:
        with self._answering():
            return bool(self.client.delete(self.PREFIX + key))

    def metas(self) -> list[dict[str, str]]:
        """The metadata of every record held (kept beside each record when written)."""
        with self._answering():
            names = sorted(self.client.scan_iter(match=self.PREFIX + "*"))
            pipe = self.client.pipeline()
            for name in names:
                pipe.hget(name, "meta")
            return [json.loads(m) for m in pipe.execute() if m is not None]


def open_store(where: str | None, ttl_s: float, timeout_s: float = 2.0):
    """The store ``--state-store`` names: None (the process's memory only), a ``redis://`` / ``rediss://`` /
    ``unix://`` URL (:class:`RedisStore`, checked to answer) or a directory (:class:`DirectoryStore`)."""
    if not where:
        return None
    if where.startswith(("redis://", "rediss://", "unix://", "valkey://")):
        store = RedisStore(where.replace("valkey://", "redis://", 1), ttl_s, timeout_s)
        store.ping()
        return store
    if "://" in where:
        raise ValueError(f"--state-store {where}: not a directory or a redis://, rediss:// or unix:// URL")
    return DirectoryStore(where, ttl_s)
