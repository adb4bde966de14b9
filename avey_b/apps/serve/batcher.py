"""Dynamic batching: one worker thread runs the model on what is waiting, grouped by kind, sorted by length and cut
into batches of at most ``max_batch_tokens`` padded tokens (:func:`avey_b.utils.batching.token_budget_batches`).

A job may instead run in steps (``steps(job)`` gives a generator, whose value is the job's result: a long input
computed a block at a time, :class:`avey_b.apps.serve.documents.Documents`): between two steps the worker takes
what queued meanwhile and runs its batches first, then the next step of the jobs in steps, in turn. So a short
request never waits behind a whole long one, only behind the step running when it came (as chunked prefill
interleaves a decoder's long prompt with other requests).

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
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field

from avey_b.utils.batching import token_budget_batches


@dataclass
class Job:
    """One input for the model: ``kind`` says what is computed (``embed``, ``tokens``, ``multivector``, ``chunks``,
    ``logits``, ``fill``, ``sparse``: :func:`avey_b.apps.serve.work.answer_batch`), ``ids`` its token ids, ``extra``
    what the kind needs besides (the token ranges of late chunking); the result arrives in ``future``. ``saved``: the
    tokens of ``ids`` the prefix cache held, run through the model for none of its steps (set by the state path,
    :meth:`avey_b.apps.serve.documents.Documents.steps`, before the result arrives)."""

    kind: str
    ids: list[int]
    extra: object = None
    future: Future = field(default_factory=Future)
    saved: int = 0


class Batcher:
    """One worker thread calling ``run(kind, jobs) -> results`` on batches of waiting jobs. ``wait_s``: after the
    first job arrives, how long to wait for more before running (0: take what queued while the last batch ran).
    ``steps(job)``: a generator computing the job in steps (its return value: the result), or None for a job that
    runs in a batch."""

    def __init__(self, run: Callable[[str, list[Job]], list], *, max_batch_tokens: int, queue_size: int,
                 wait_s: float, steps: Callable[[Job], Iterator | None] | None = None):
        self.run, self.max_batch_tokens, self.queue_size, self.wait_s = run, max_batch_tokens, queue_size, wait_s
        self.steps = steps
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

    def _take(self, idle: bool) -> list[Job] | None:
        """What waits. ``idle`` (no job in steps): wait for a job, then ``wait_s`` for more; None once closed and
        drained. Otherwise take what waits now, maybe nothing."""
        with self.ready:
            if idle:
                while not self.waiting and not self.closed:
                    self.ready.wait()
                if not self.waiting:
                    return None  # closed and drained
                deadline = time.monotonic() + self.wait_s
                while not self.closed and (left := deadline - time.monotonic()) > 0:  # a burst: one set of batches
                    self.ready.wait(left)
            taken = list(self.waiting)
            self.waiting.clear()
            return taken

    def _loop(self) -> None:
        stepping: collections.deque[tuple[Job, Iterator]] = collections.deque()  # jobs in steps, in turn
        while (waiting := self._take(idle=not stepping)) is not None:
            batched = []
            for job in waiting:
                steps = self.steps(job) if self.steps else None
                if steps is None:
                    batched.append(job)
                else:
                    stepping.append((job, steps))
            for batch in self.batches(batched):
                try:
                    results = self.run(batch[0].kind, batch)
                    for job, result in zip(batch, results, strict=True):
                        job.future.set_result(result)
                except Exception as error:  # noqa: BLE001 -- the requests get the error; the server keeps serving
                    for job in batch:
                        job.future.set_exception(error)
            if stepping:
                self._step(stepping)

    @staticmethod
    def _step(stepping: collections.deque[tuple[Job, Iterator]]) -> None:
        """One step of the first job in steps; it then goes last, or is answered when done."""
        job, steps = stepping.popleft()
        if job.future.cancelled():  # its request is gone: stop computing it
            steps.close()
            return
        try:
            next(steps)
        except StopIteration as done:
            job.future.set_result(done.value)
        except Exception as error:  # noqa: BLE001 -- the request gets the error; the server keeps serving
            job.future.set_exception(error)
        else:
            stepping.append((job, steps))

    def batches(self, jobs: list[Job]) -> list[list[Job]]:
        """Jobs of one kind, sorted by length, cut so that no batch pads past ``max_batch_tokens``."""
        return [batch for kind in dict.fromkeys(j.kind for j in jobs)
                for batch in token_budget_batches([j for j in jobs if j.kind == kind], self.max_batch_tokens,
                                                  lambda j: len(j.ids))]
