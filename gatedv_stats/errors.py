"""The exception types for bad input: each message is the one line the user sees."""

from __future__ import annotations


class InputError(ValueError):
    """Bad user input (a file, row or field); the message names it in one line."""


class ParameterError(InputError):
    """A bad argument of a library function. `parameter` is the argument's name, so that the command line can
    name its own flag instead (`n_resamples` → `--samples`); `detail` is the message without the name."""

    def __init__(self, parameter: str, detail: str) -> None:
        super().__init__(f"{parameter}: {detail}")
        self.parameter = parameter
        self.detail = detail

    def __reduce__(self):  # rebuilt from both arguments when it crosses a process boundary
        return type(self), (self.parameter, self.detail)


class RunFailure(RuntimeError):
    """A run that could not be completed for a reason outside the inputs (a worker process lost, a device out of
    memory, a launcher that failed); the message is the one line the user sees, with what was kept."""
