"""A continuous submission's batches, reported as each commits instead of when the application ends.

A continuous application runs for hours and records each batch's outcome in Snowflake's batch
outcomes table as the batch commits (under the submission's attempt id). :class:`OutcomeWatcher`
reads them while spark-submit runs, every ``interval`` seconds and once more after it returned,
and hands each new one to ``on_outcome`` exactly once, in the order they were recorded: a batch's
metrics go out within seconds of its commit, not at the end of the run.

Reading and reporting never fail the task: the batches are committed whatever happens here, and a
failed read is tried again at the next poll.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

#: Seconds between two reads of a running continuous submission's outcomes.
OUTCOME_POLL_SECONDS = 5.0

_Outcome = TypeVar("_Outcome")


class OutcomeWatcher(Generic[_Outcome]):
    """Hands each outcome of a running submission to ``on_outcome``, once, as it appears.

    Use it around the submission: ``with OutcomeWatcher(read, on_outcome): submit()``.

    :param read: every outcome the submission recorded so far, oldest first.
    :param on_outcome: what to do with a new one (emit its metrics); an error is logged.
    :param interval: seconds between two reads while the submission runs.
    """

    def __init__(
        self,
        read: Callable[[], Sequence[_Outcome]],
        on_outcome: Callable[[_Outcome], None],
        interval: float = OUTCOME_POLL_SECONDS,
    ) -> None:
        self._read = read
        self._on_outcome = on_outcome
        self._interval = interval
        self._handed = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @property
    def handed(self) -> int:
        """How many outcomes were handed on so far."""
        return self._handed

    def poll(self) -> int:
        """Read the outcomes and hand on those not handed yet; how many were new."""
        with self._lock:
            try:
                outcomes = list(self._read())
            except Exception:  # read again at the next poll; the batches are committed
                log.warning("Could not read the submission's batch outcomes (read again shortly)", exc_info=True)
                return 0
            new = outcomes[self._handed :]
            for outcome in new:
                try:
                    self._on_outcome(outcome)
                except Exception:
                    log.warning("Could not report a committed batch", exc_info=True)
            self._handed += len(new)
            return len(new)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.poll()

    def __enter__(self) -> OutcomeWatcher[_Outcome]:
        self._thread = threading.Thread(target=self._run, name="batch-outcome-watcher", daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.poll()  # what committed since the last read, the application's last batches among them
