"""Every module the docs name exists: a module renamed, moved or removed fails here until the pages that name it follow.

What counts as a module name: a path under a package or a repository folder (`gatedv_stats/analysis/ledger.py`,
`trainer/hf/`, `bench/ledger_fdr.py`), a dotted name from a package (`gatedv_stats.analysis.sequential`,
`trainer.run.ranks.rank_zero_checks`: the module, then a name it must define), a name from one of the packages'
subpackages in backticks (`io/ledgerfile`, `stats.sequential.stagewise_p`, `hf.evaluate`), a file name in backticks
(`resampling.py`), and the first column of docs/architecture.md's module tables, read under the package of their
section. File names of other kinds (`run.json`, `model.safetensors`) are not modules and are left alone.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("gatedv_stats", "trainer", "gatedv_cli")
FOLDERS = ("tests", "bench", "examples")  # named by path only (`bench/ledger_fdr.py`)
# The subpackages the docs name without their package (`stats/sequential`, `run.train`). Listed rather than read
# from the tree, so that a subpackage renamed leaves its old name here and every page still naming it fails.
SUBPACKAGES = {
    "core": "gatedv_stats", "io": "gatedv_stats", "stats": "gatedv_stats", "pairing": "gatedv_stats",
    "analysis": "gatedv_stats", "imports": "gatedv_stats", "reporting": "gatedv_stats", "results": "gatedv_stats",
    "model": "trainer", "data": "trainer", "run": "trainer", "grid": "trainer", "hf": "trainer",
}
# The module tables of docs/architecture.md (header `| module | what |`) name modules relative to a package,
# given by the section (`## ` heading) the table is in.
TABLE_PACKAGES = {
    "`gatedv_stats` (the main product)": "gatedv_stats",
    "`trainer`": "trainer",
    "The command line": "gatedv_cli",
}
# a name ending in one of these is a file of that kind, not a module
NOT_MODULES = {
    "json", "jsonl", "csv", "parquet", "pt", "bin", "npy", "md", "toml", "yml", "yaml", "txt", "sh", "ipynb",
    "safetensors", "lock", "html", "tex", "log", "png", "svg", "tmp",
}
DOCS = sorted([*(ROOT / "docs").glob("*.md"), ROOT / "README.md", *(ROOT / "examples").glob("*.md")])

SEGMENT = r"[A-Za-z_][\w-]*"
# a path or dotted name from a package or folder, wherever it stands (prose, backticks, code blocks)
ABSOLUTE = re.compile(rf"(?<![\w./-])(?:{'|'.join(PACKAGES + FOLDERS)})(?:[./]{SEGMENT})+(?:/\*|/)?")
# a name from a subpackage, at the start of a backticked span
RELATIVE = re.compile(rf"^(?:{'|'.join(SUBPACKAGES)})(?:[./]{SEGMENT})+(?:/\*|/)?")
FILE_NAME = re.compile(rf"^{SEGMENT}\.py$")
SPAN = re.compile(r"`([^`\n]+)`")


@cache
def _defined_names(module: Path) -> frozenset[str]:
    """The names a module defines at its top level (and the strings of a lazy `__getattr__`'s tables)."""
    tree = ast.parse(module.read_text(encoding="utf-8"))
    names: set[str] = set()

    def collect(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
            elif isinstance(node, (ast.If, ast.Try)):
                collect(node.body + node.orelse + getattr(node, "finalbody", []))
                for handler in getattr(node, "handlers", []):
                    collect(handler.body)

    collect(tree.body)
    if "__getattr__" in names:
        names.update(n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str))
    return frozenset(names)


@cache
def _file_names() -> frozenset[str]:
    files = [*ROOT.glob("*.py")]
    for folder in PACKAGES + FOLDERS:
        files += (ROOT / folder).rglob("*.py")
    return frozenset(path.name for path in files)


def _resolve(package: str, segments: list[str]) -> str | None:
    """Why `package` + `segments` (modules, then at most the names they define) is not there, or None."""
    path = ROOT / package
    for index, segment in enumerate(segments):
        if (path / segment / "__init__.py").is_file():
            path = path / segment
        elif (path / f"{segment}.py").is_file():
            path = path / f"{segment}.py"
            break
        else:
            init = path / "__init__.py"
            if init.is_file() and segment in _defined_names(init):
                return None
            where = path.relative_to(ROOT).as_posix()
            return f"no module or package {segment!r} in {where}/"
    else:
        return None
    rest = segments[index + 1:]
    if rest and rest[0] not in _defined_names(path):
        return f"{path.relative_to(ROOT).as_posix()} defines no {rest[0]!r}"
    return None


def _problem(name: str, package: str | None = None) -> str | None:
    """Why a module name read from the docs does not exist, or None when it does (or is not a module name)."""
    name = name.removesuffix("()")
    if package is None:
        first = re.split(r"[./]", name, maxsplit=1)[0]
        if first in FOLDERS:  # a script or test module; other files there may be outputs yet to be written
            return None if not name.endswith(".py") or (ROOT / name).is_file() else f"no file {name}"
        package = None if first in PACKAGES else SUBPACKAGES[first]
    if name.rsplit(".", 1)[-1] in NOT_MODULES:
        return None
    glob = name.endswith("/*")
    name = name.removesuffix("/*").rstrip("/")
    if name.endswith(".py"):
        path = ROOT / (package or "") / name
        return None if path.is_file() else f"no file {path.relative_to(ROOT).as_posix()}"
    segments = re.split(r"[./]", name)
    if package is None:
        package, segments = segments[0], segments[1:]
    problem = _resolve(package, segments)
    if problem is None and glob and not list((ROOT / package).joinpath(*segments).glob("*.py")):
        problem = f"no modules in {package}/{'/'.join(segments)}/"
    return problem


def problems_in(text: str) -> list[str]:
    """`LINE: name: why` for every module name in a page's text that does not exist."""
    found: list[tuple[int, str, str | None]] = []
    for number, line in enumerate(text.splitlines(), 1):
        found += [(number, match.group(), None) for match in ABSOLUTE.finditer(line)]
        for span in SPAN.findall(line):
            span = span.strip()
            if FILE_NAME.match(span):
                if span not in _file_names():
                    found.append((number, span, f"no file named {span} in the repository"))
            elif match := RELATIVE.match(span):
                found.append((number, match.group(), None))
    problems = []
    for number, name, known in found:
        problem = known or _problem(name)
        if problem:
            problems.append(f"{number}: {name}: {problem}")
    return problems


def table_problems_in(text: str) -> list[str]:
    """`LINE: name: why` for the first column of every module table, read under its section's package."""
    problems, heading, package = [], None, None
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("## "):
            heading, package = line[3:].strip(), None
        elif line.replace(" ", "").startswith("|module|"):
            package = TABLE_PACKAGES.get(heading or "")
            if package is None:
                problems.append(f"{number}: a module table under {heading!r}, a section of no known package")
        elif package and line.startswith("|") and not line.startswith("|---"):
            for name in SPAN.findall(line.split("|")[1]):
                problem = _problem(name, package)
                if problem:
                    problems.append(f"{number}: {name} ({package}): {problem}")
        elif not line.startswith("|"):
            package = None
    return problems


@pytest.mark.parametrize("page", DOCS, ids=lambda page: page.relative_to(ROOT).as_posix())
def test_every_module_a_page_names_exists(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    problems = problems_in(text) + table_problems_in(text)
    assert not problems, f"{page.relative_to(ROOT)} names modules that do not exist:\n" + "\n".join(problems)


def test_every_subpackage_is_known() -> None:
    """A subpackage the docs may name without its package is checked only when it is listed here."""
    on_disk = {path.parent.name: package for package in PACKAGES for path in (ROOT / package).glob("*/__init__.py")}
    assert on_disk.items() <= SUBPACKAGES.items()


def test_the_architecture_tables_are_read() -> None:
    """Each module table's rows are found and resolved, so that the table check cannot pass by reading nothing."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    headings = [line[3:].strip() for line in text.splitlines() if line.startswith("## ")]
    assert set(TABLE_PACKAGES) <= set(headings)
    stale = text.replace("| `io/ledgerfile` |", "| `io/ledger_file` |").replace("| `run.train` |", "| `run.training` |")
    stale = stale.replace("| `group` |", "| `groups` |")
    assert [problem.split(": ")[1] for problem in table_problems_in(stale)] == [
        "io/ledger_file (gatedv_stats)", "run.training (trainer)", "groups (gatedv_cli)"]


@pytest.mark.parametrize(("text", "stale"), [
    ("the ledger (`gatedv_stats/analysis/ledgers.py`)", ["gatedv_stats/analysis/ledgers.py"]),
    ("see gatedv_stats.analysis.sequentials for the design", ["gatedv_stats.analysis.sequentials"]),
    ("`trainer.run.ranks.rank_zero_check` broadcasts", ["trainer.run.ranks.rank_zero_check"]),
    ("`stats/sequentials` and `io/ledgerfile` and `hf.scores`", ["stats/sequentials", "hf.scores"]),
    ("`stats.sequential.stage_wise_p` at a stop", ["stats.sequential.stage_wise_p"]),
    ("the module `resampling_.py`", ["resampling_.py"]),
    ("`bench/ledger_fdrs.py` and `bench/ledger_fdr.py`", ["bench/ledger_fdrs.py"]),
    ("`run.json`, `bench.json`, `model.safetensors`, `data/heldout.parquet`, `examples/small-*.toml`", []),
    ("`gv.compare`, `scipy.stats.t`, `workers.deferred_stop()`, the trainer. The examples/ and tests/", []),
    ("`gatedv_stats.Ledger`, `gatedv_stats.core.errors.InputError`, `reporting/sections/*`, `io/lmeval/`", []),
])
def test_stale_names_are_found_and_prose_is_not(text: str, stale: list[str]) -> None:
    assert [problem.split(": ")[1] for problem in problems_in(text)] == stale
