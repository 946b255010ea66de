"""Signals during training, held back to the end of the update in progress so that a checkpoint of it is written
first (docs/failure-contract.md)."""

from __future__ import annotations

import contextlib
import multiprocessing
import signal
import threading

from gatedv_stats.core import workers

_USER_SIGNALS = tuple(getattr(signal, name) for name in ("SIGUSR1", "SIGUSR2") if hasattr(signal, name))


class DeferredInterruption:
    """Ctrl-C or SIGTERM during training takes effect at the end of the update in progress, once the loop has
    written a checkpoint of it, and is then delivered as it would have been; a second signal takes effect at once.
    A user signal (USR1, USR2) that a Python handler waits for, such as the "save and requeue" signal submitit
    sends a cluster job before its time limit, reaches that handler at the end of the update in progress too,
    after its checkpoint; training goes on if the handler returns.

    In a process's main thread; in a sweep worker, a stop (its parent interrupted or gone) waits the same way
    (`gatedv_stats.core.workers.deferred_stop`). Under data parallel (`parallel`) the ranks agree in the training
    loss's all-reduce to stop after the same update, or to checkpoint it for a user signal that any rank holds
    (each rank then passes its own on); a repeated signal is held like the first, since torchrun passes the
    terminal's Ctrl-C on to its ranks again (its own timeout ends ranks that do not stop).
    """

    def __init__(self, parallel: bool = False) -> None:
        in_worker = multiprocessing.parent_process() is not None
        self.enabled = threading.current_thread() is threading.main_thread() and not in_worker
        self.in_worker = in_worker and not parallel
        self.parallel = parallel
        self._signal: int | None = None
        self.user_signal: int | None = None  # a user signal held back until the end of the update
        self._previous: dict = {}
        self._worker_stop = contextlib.ExitStack()

    @property
    def received(self) -> int | None:
        """The signal held back, if one came (a worker's stop counts as SIGTERM)."""
        if self._signal is None and self.in_worker and workers.stop_requested():
            return signal.SIGTERM
        return self._signal

    def __enter__(self) -> DeferredInterruption:
        if self.in_worker:
            self._worker_stop.enter_context(workers.deferred_stop())
        if self.enabled:
            for signum in (signal.SIGINT, signal.SIGTERM):
                if signal.getsignal(signum) is not signal.SIG_IGN:
                    self._previous[signum] = signal.signal(signum, self._receive)
            for signum in _USER_SIGNALS:
                if callable(signal.getsignal(signum)):
                    self._previous[signum] = signal.signal(signum, self._receive_user)
        return self

    def __exit__(self, *exc_info) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        self._previous = {}
        self._worker_stop.close()  # a stopped worker ends here

    def deliver(self) -> None:
        """The signal held back, delivered now to the handler it would have reached."""
        if self._signal is not None:
            signal.raise_signal(self._signal)

    def deliver_user_signal(self) -> None:
        """The user signal held back, if one came, passed to its handler now (which may end the process)."""
        signum, self.user_signal = self.user_signal, None
        if signum is not None:
            self._previous[signum](signum, None)

    def _receive_user(self, signum: int, frame) -> None:
        self.user_signal = signum

    def _receive(self, signum: int, frame) -> None:
        if self._signal is not None and not self.parallel:
            self.__exit__()
            signal.raise_signal(signum)
        self._signal = signum
