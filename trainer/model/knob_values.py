"""The values a knob takes (`Knob`) and `KEY=VALUE` command-line options: shared by the variant knobs
(`trainer.model.knobs`) and the size knobs (`trainer.model.sizes`)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from gatedv_stats.core.errors import InputError

MATCHED = "matched"
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")  # a new variant or size
RESERVED_NAMES = ("all",)  # `gatedv params --variant all`, `--config all`


# The largest integer knob: every weight of every size then stays well inside torch's int64 sizes.
MAX_KNOB_INTEGER = 2**48


class KnobError(InputError):
    """A knob value the size's model cannot take (known only once the size is); the message starts with the
    knob's name, so that the command line can put its flag in front."""


@dataclass(frozen=True)
class Knob:
    """One knob: its name, its allowed values (a list of words, or integers / booleans) and what it does."""

    name: str
    kind: type  # str (one of `choices`), int (at least `minimum`; d_ff also `matched`), float (positive) or bool
    help: str
    choices: tuple[str, ...] = ()
    minimum: int = 1

    @property
    def allowed(self) -> str:
        if self.kind is bool:
            return "true or false"
        if self.kind is float:
            return "a positive number"
        if self.kind is int:
            integer = "a positive integer" if self.minimum == 1 else f"an integer of at least {self.minimum}"
            return f"{integer} or {MATCHED}" if self.name == "d_ff" else integer
        return ", ".join(self.choices)

    def value(self, raw: object) -> str | int | float | bool:
        """`raw` (a command-line string or a TOML value) as this knob's value; InputError naming the knob."""
        if self.kind is bool:
            if isinstance(raw, bool):
                return raw
            if isinstance(raw, str) and raw.lower() in ("true", "false"):
                return raw.lower() == "true"
        elif self.kind is int:
            if self.name == "d_ff" and raw == MATCHED:
                return MATCHED
            number = raw if isinstance(raw, int) and not isinstance(raw, bool) else _integer(raw)
            if number is not None and number > MAX_KNOB_INTEGER:
                raise InputError(f"{self.name}: {raw!r} is above the largest allowed value, {MAX_KNOB_INTEGER:,}")
            if number is not None and number >= self.minimum:
                return number
        elif self.kind is float:
            real = _number(raw)
            if real is not None and 0 < real < math.inf:
                return real
        elif isinstance(raw, str) and raw in self.choices:
            return raw
        raise InputError(f"{self.name}: {raw!r} is not {'one of ' if self.choices else ''}{self.allowed}")


def _integer(raw: object) -> int | None:
    return int(raw) if isinstance(raw, str) and re.fullmatch(r"[+-]?[0-9]+", raw.strip()) else None


def _number(raw: object) -> float | None:
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        return float(raw)
    try:
        return float(raw) if isinstance(raw, str) else None
    except ValueError:
        return None


def check_values(values: Mapping[str, object], knobs: Mapping[str, Knob], what: str) -> dict:
    """Every entry of `values` checked and typed by its knob of `knobs`, in `knobs` order; InputError
    "NAME: ..." for the first unknown or bad one (`what`: "knob" or "size knob")."""
    for name in values:
        if name not in knobs:
            raise InputError(f"{name}: unknown {what} ({what}s: {', '.join(knobs)})")
    return {name: knobs[name].value(values[name]) for name in knobs if name in values}


def parse_key_values(options: Sequence[str], flag: str, form: str, hint: str) -> dict[str, str]:
    """The raw `KEY=VALUE` pairs of repeated `flag` options; a malformed or repeated one is an InputError naming
    it (`form`: the pair as the help writes it, `hint`: where the keys are listed)."""
    raw: dict[str, str] = {}
    for option in options:
        name, equals, value = option.partition("=")
        name = name.strip()
        if not equals or not name or not value.strip():
            raise InputError(f"{flag}: {option!r} is not {form} ({hint})")
        if name in raw:
            raise InputError(f"{flag} {name}: given twice")
        raw[name] = value.strip()
    return raw


def parse_checked_options(options: Sequence[str], flag: str, form: str, hint: str,
                          check: Callable[[Mapping[str, object]], dict]) -> dict:
    """Repeated `flag KEY=VALUE` options parsed (`parse_key_values`) and checked by `check`; a bad one is an
    InputError that starts with the flag."""
    raw = parse_key_values(options, flag, form, hint)
    try:
        return check(raw)
    except InputError as error:
        raise InputError(f"{flag} {error}") from None
