"""The exception types for bad input: each message is the one line the user sees."""

from __future__ import annotations

from collections.abc import Callable


class InputError(ValueError):
    """Bad user input (a file, row or field); the message names it in one line.

    Examples
    --------
    >>> try:
    ...     gv.load(tmp_dir / "missing.parquet")
    ... except gv.InputError as error:
    ...     print(str(error).endswith("missing.parquet: no such file"))
    True
    """


class ParameterError(InputError):
    """A bad argument of a library function. `parameter` is the argument's name, so that the command line can
    name its own flag instead (`n_resamples` → `--samples`); `detail` is the message without the name.

    `detail` may name the parameter and the parameters in `mentions` inside the text as `{name}` fields (then,
    with `leading=False`, the message is the text alone): `str(error)` names them as parameters, `render` as a
    caller's own names (the command line: flags).

    Parameters
    ----------
    parameter : str
        The argument's name.
    detail : str
        The message without the name; `{name}` fields name parameters.
    mentions : tuple of str
        Other parameters the message names.
    leading : bool
        Whether the message starts with the parameter's name.

    Examples
    --------
    >>> try:
    ...     gv.compare(example_study(tmp_dir), baseline_arm="baseline", variant_arm="gatedv", n_resamples=0)
    ... except gv.ParameterError as error:
    ...     print(error.parameter)
    n_resamples
    """

    def __init__(self, parameter: str, detail: str, mentions: tuple[str, ...] = (), leading: bool = True) -> None:
        self.parameter = parameter
        self.template = detail
        self.mentions = mentions
        self.leading = leading
        super().__init__(self.render())

    @property
    def detail(self) -> str:
        """The message without the leading parameter name, other parameters named as parameters."""
        return self._filled(str)

    def render(self, name_of: Callable[[str], str] = str) -> str:
        """The message with every parameter it names as `name_of(parameter)` (e.g. the option that sets it)."""
        detail = self._filled(name_of)
        return f"{name_of(self.parameter)}: {detail}" if self.leading else detail

    def _filled(self, name_of: Callable[[str], str]) -> str:
        text = self.template
        for name in (self.parameter, *self.mentions):
            text = text.replace("{" + name + "}", name_of(name))
        return text

    def __reduce__(self):  # rebuilt from every argument when it crosses a process boundary
        return type(self), (self.parameter, self.template, self.mentions, self.leading)


class NoSpreadError(InputError):
    """The paired differences do not vary over seeds or units (documents, items): there is no spread to form an
    interval or a test from. Callers that can go on without one (a comparison without a verdict) catch this type."""


class RunFailure(RuntimeError):
    """A run that could not be completed for a reason outside the inputs (a worker process lost, a device out of
    memory, a launcher that failed); the message is the one line the user sees, with what was kept."""


class NoSpaceError(RunFailure):
    """A file could not be written because its file system is full (or a quota is used up); the message names the
    file and what is kept (the previous file under its name: writes are atomic). `path`: the file, `reason`: the
    system's words."""

    def __init__(self, message: str, path: str | None = None, reason: str | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.reason = reason

    def __reduce__(self):  # rebuilt from every argument when it crosses a process boundary
        return type(self), (str(self), self.path, self.reason)
