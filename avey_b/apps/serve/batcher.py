"""Dynamic batching: one worker thread runs the model on what is waiting, grouped by kind, sorted by length and cut
into batches of at most ``max_batch_tokens`` padded tokens (:func:`avey_b.utils.batching.token_budget_batches`).

The queue bounds the work in flight, not one request: a request whose inputs would pass ``queue_size`` is refused
(``queue.Full``, the server's 503) only while other inputs wait; an empty queue takes any request whole, and its
inputs are split across as many batches as they need. (How many inputs one request may hold is the server's
``--max-request-inputs``, checked before anything is queued.)
"""

from __future__ import annotations

import collections
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

from avey_b.utils.batching import token_budget_batches


@dataclass
class Job:
    """One input for the model: ``kind`` says what is computed (``embed``, ``tokens``, ``chunks``, ``logits``,
    ``fill``: :func:`avey_b.apps.serve.work.answer_batch`), ``ids`` its token ids, ``extra`` what the kind needs
    besides (the token ranges of late chunking); the result arrives in ``future``."""

    kind: str
    ids: list[int]
    extra: object = None
    future: Future = field(default_factory=Future)


class Batcher:
    """One worker thread calling ``run(kind, jobs) -> results`` on batches of waiting jobs. ``wait_s``: after the
    first job arrives, how long to wait for more before running (0: take what queued while the last batch ran)."""

    def __init__(self, run: Callable[[str, list[Job]], list], *, max_batch_tokens: int, queue_size: int,
                 wait_s: float):
        self.run, self.max_batch_tokens, self.queue_size, self.wait_s = run, max_batch_tokens, queue_size, wait_s
        self.waiting: collections.deque[Job] = collections.deque()
        self.ready = threading.Condition()
        self.closed = False
        self.thread = threading.Thread(target=self._loop, name="avey-b-batcher", daemon=True)
        self.thread.start()

    @property
    def depth(self) -> int:
        """Inputs waiting for the model (not counting the batches running)."""
        return len(self.waiting)

    def submit(self, jobs: list[Job]) -> None:
        """Queue ``jobs``, all or none: raises ``queue.Full`` when other inputs wait and these would pass
        ``queue_size``; an empty queue takes them whatever their number."""
        with self.ready:
            if self.closed:
                raise RuntimeError("the server is shutting down")
            if self.waiting and len(self.waiting) + len(jobs) > self.queue_size:
                raise queue.Full
            self.waiting.extend(jobs)
            self.ready.notify()

    def close(self) -> None:
        """Finish what is queued, then stop the worker."""
        with self.ready:
            self.closed = True
            self.ready.notify()
        self.thread.join(timeout=60)

    def _take(self) -> list[Job] | None:
        with self.ready:
            while not self.waiting and not self.closed:
                self.ready.wait()
            if not self.waiting:
                return None  # closed and drained
            deadline = time.monotonic() + self.wait_s
            while not self.closed and (left := deadline - time.monotonic()) > 0:  # a burst becomes one set of batches
                self.ready.wait(left)
            taken = list(self.waiting)
            self.waiting.clear()
            return taken

    def _loop(self) -> None:
        while (waiting := self._take()) is not None:
            for batch in self.batches(waiting):
                try:
                    results = self.run(batch[0].kind, batch)
                    for job, result in zip(batch, results, strict=True):
                        job.future.set_result(result)
                except Exception as error:  # noqa: BLE001 -- the requests get the error; the server keeps serving
                    for job in batch:
                        job.future.set_exception(error)

    def batches(self, jobs: list[Job]) -> list[list[Job]]:
        """Jobs of one kind, sorted by length, cut so that no batch pads past ``max_batch_tokens``."""
        return [batch for kind in dict.fromkeys(j.kind for j in jobs)
                for batch in token_budget_batches([j for j in jobs if j.kind == kind], self.max_batch_tokens,
                                                  lambda j: len(j.ids))]
