"""The plain data a report template renders: sections of tables (already formatted as the paper prints them),
figures (Vega-Lite specifications) and text. A section whose inputs are missing keeps `omitted`, the one
sentence saying why."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Cell:
    """One table cell: formatted text, shown bold (a selected rate) or monospaced (a hash)."""

    text: str
    bold: bool = False
    mono: bool = False


@dataclass(frozen=True)
class RowGroup:
    """Rows under an optional group label (e.g. "development set; LR = 0.0048")."""

    label: str | None
    rows: tuple[tuple[Cell, ...], ...]


@dataclass(frozen=True)
class Table:
    """A paper table: caption, column headers, alignment, grouped rows and notes below it."""

    key: str  # [a-z0-9-]: an HTML id and a LaTeX label
    caption: str
    columns: tuple[str, ...]
    align: str  # one letter per column, "l" or "r"
    groups: tuple[RowGroup, ...]
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Figure:
    """An Altair figure as its Vega-Lite specification, with the caption shown under it."""

    key: str
    title: str
    caption: str
    spec: dict  # Vega-Lite, data inlined


@dataclass(frozen=True)
class Block:
    """Preformatted text (JSON configurations) shown verbatim."""

    title: str
    text: str


@dataclass(frozen=True)
class Section:
    """One report section; `omitted` holds the sentence saying why the inputs cannot fill it."""

    key: str
    title: str
    intro: tuple[str, ...] = ()
    tables: tuple[Table, ...] = ()
    figures: tuple[Figure, ...] = ()
    blocks: tuple[Block, ...] = ()
    omitted: str | None = None  # why the inputs cannot fill this section


@dataclass(frozen=True)
class ReportData:
    """Everything a template renders."""

    title: str
    subtitle: str
    version: str
    reference: str | None
    sections: tuple[Section, ...]

    @property
    def figures(self) -> list[Figure]:
        return [figure for section in self.sections for figure in section.figures]


def row(*cells: str | Cell) -> tuple[Cell, ...]:
    """A table row from texts and cells."""
    return tuple(cell if isinstance(cell, Cell) else Cell(cell) for cell in cells)


def omitted(key: str, title: str, why: str) -> Section:
    """A section the inputs cannot fill, with the sentence saying why."""
    return Section(key=key, title=title, omitted=why)


def slug(value: str | None) -> str:
    """[a-z0-9-] text for a table or figure key."""
    return "".join(ch if ch.isalnum() else "-" for ch in str(value or "unnamed").lower()).strip("-") or "unnamed"
