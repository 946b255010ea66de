"""Experiment files (docs/method-statistics.md §5): a grid of paired runs as TOML, checked before anything trains, and
written back (the confirmation grid of `gatedv select-lr`).

An experiment names a data directory, a size, variants, seeds and learning rates (one list for every
variant, or a table of lists per variant). Each (variant, lr, seed) trains into
`OUT/<variant>/lr<lr>/seed<seed>/` (`trainer.grid.sweep` runs them) and is evaluated on the experiment's sets.
Paths in the file are relative to it.

    name = "small-confirmation"
    data = "../data/fineweb-edu-small"
    config = "small"
    variants = ["baseline", "gatedv"]
    seeds = [1, 2, 3, 4, 5]
    lrs = [0.0048]                       # or: [lrs] baseline = [0.0048]  gatedv = [0.0024]
    eval_sets = ["dev", "heldout"]       # optional; these are the defaults
    out = "runs/small-confirmation"
    # optional: updates, warmup, eval_every, batch_size (default: the size's recipe)

    [select]                             # optional, for `gatedv select-lr`
    seed = 20270201                      # the selection seed (default: the smallest seed of the grid)
    confirm_seeds = [20270211, 20270212, 20270213]
    confirm_out = "runs/medium-confirmation"

Variants of your own are tables instead of the `variants` list (TOML cannot hold both): every
`[variants.NAME]` table is a variant of the grid, in file order; an empty table is the preset NAME, a
table of knobs (`gatedv params --knobs`) a new variant, the baseline of the size plus those knobs.

    [variants.baseline]
    [variants.k-silu]
    key_act = "silu"

A size of one's own is a `[sizes.NAME]` table of size knobs (`gatedv params --size-knobs`) that `config` names; a
preset named there takes recipe knobs and only model knobs that leave it as it is. `gatedv sweep --size-knob` adds
knobs to the experiment's size.

    config = "wide"
    [sizes.wide]
    n_layers = 4
    d_model = 256
    n_heads = 4
    d_ff = 768
    seq_len = 1024
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from gatedv_stats.core.atomic import write_text_atomic
from gatedv_stats.core.errors import InputError, ParameterError
from gatedv_stats.core.validation import check_seed
from trainer.data.prepared import EVAL_SET_NAMES, PreparedData
from trainer.grid.grid_run import GridRun, lr_directory_name, run_directory
from trainer.model.knobs import resolve_variant
from trainer.model.params import variant_parameters
from trainer.model.sizes import resolve_size
from trainer.run.recipe import RunSpec

if sys.version_info >= (3, 11):
    import tomllib
else:  # the same parser before it joined the standard library
    import tomli as tomllib

_KEYS = {"name", "data", "config", "variants", "seeds", "lrs", "eval_sets", "out", "updates", "warmup",
         "eval_every", "batch_size", "select", "sizes"}
_SELECT_KEYS = {"seed", "confirm_seeds", "confirm_out"}
_KIND_NAMES = {int: "an integer", float: "a number", str: "a string"}


@dataclass(frozen=True)
class Experiment:
    """A grid of variants × learning rates × seeds (see the module docstring for the file format)."""

    name: str
    data: Path
    size: str
    variants: tuple[str, ...]
    seeds: tuple[int, ...]
    lrs: dict  # variant -> tuple of peak learning rates
    out: Path
    eval_sets: tuple[str, ...] = ("dev", "heldout")
    updates: int | None = None
    warmup: int | None = None
    eval_every: int | None = None
    batch_size: int | None = None
    selection_seed: int | None = None
    confirm_seeds: tuple[int, ...] = ()
    confirm_out: Path | None = None
    knobs: dict = field(default_factory=dict)  # new variant -> its knobs ([variants.NAME] tables)
    size_knobs: dict = field(default_factory=dict)  # the size's knobs (its [sizes.NAME] table)
    source: Path | None = None  # the TOML file it was read from, named by errors about its fields

    def runs(self) -> list[GridRun]:
        """Every run of the grid, variant-major, then learning rate, then seed."""
        return [GridRun(variant, lr, seed, run_directory(self.out, variant, lr, seed), self.spec(variant, lr, seed),
                        self.eval_sets)
                for variant in self.variants for lr in self.lrs[variant] for seed in self.seeds]

    def restricted(self, variants: Sequence[str], seeds: Sequence[int]) -> Experiment:
        """The same grid over some of its variants and seeds (their runs keep their directories): one round of a
        sequential sweep."""
        return replace(self, variants=tuple(variants), seeds=tuple(seeds),
                       lrs={variant: self.lrs[variant] for variant in variants})

    def spec(self, variant: str, lr: float, seed: int) -> RunSpec:
        optional = {key: getattr(self, key) for key in ("updates", "warmup", "eval_every", "batch_size")
                    if getattr(self, key) is not None}
        return RunSpec.make(self.data, self.size, variant, seed, lr=lr, knobs=self.knobs.get(variant),
                            size_knobs=self.size_knobs, **optional)

    def describe_variants(self) -> dict[str, dict]:
        """Per variant, its trainable parameters and the knobs that differ from the size's baseline."""
        described = {variant: variant_parameters(self.size, variant, self.knobs.get(variant), self.size_knobs)
                     for variant in self.variants}
        return {variant: {"parameters": count, "knobs": knobs} for variant, (count, knobs) in described.items()}

    def check_data(self) -> None:
        """The data directory is a prepared one (before any run starts); else an InputError naming the `data`
        field of the experiment file."""
        try:
            PreparedData.open(self.data)
        except InputError as error:
            raise InputError(f"{self.source or self.name}: data: {error}") from None



def load_experiment(path: str | Path, size_knobs: dict | None = None) -> Experiment:
    """Read and check an experiment TOML file; `size_knobs` (checked, as from `--size-knob`) are added to those of
    its size."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such experiment file")
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        hint = "; [variants.NAME] tables replace the variants list" if "'variants'" in str(error) else ""
        raise InputError(f"{path}: invalid TOML ({error}){hint}") from None
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise InputError(f"{path}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(_KEYS))})")
    for key in ("data", "config", "variants", "seeds", "lrs", "out"):
        if key not in raw:
            raise InputError(f"{path}: missing key {key!r}")
    base = path.parent
    size = _typed(raw, "config", str, path)
    sizes = _size_knobs(raw.get("sizes", {}), size, size_knobs or {}, path)
    variants, knobs = _variants(raw["variants"], size, sizes, path)
    seeds = _seeds(_list_of(raw, "seeds", int, path), "seeds", path)
    lrs = _learning_rates(raw["lrs"], variants, path)
    _check_rate_directories(lrs, isinstance(raw["lrs"], list), path)
    select = raw.get("select", {})
    if not isinstance(select, dict) or set(select) - _SELECT_KEYS:
        raise InputError(f"{path}: [select] may hold only {', '.join(sorted(_SELECT_KEYS))}")
    experiment = Experiment(
        name=_typed(raw, "name", str, path) if "name" in raw else path.stem,
        data=base / _typed(raw, "data", str, path),
        size=_typed(raw, "config", str, path),
        variants=variants,
        seeds=seeds,
        lrs=lrs,
        out=base / _typed(raw, "out", str, path),
        eval_sets=_eval_sets(raw, path) if "eval_sets" in raw else EVAL_SET_NAMES,
        **{key: _typed(raw, key, int, path) for key in ("updates", "warmup", "eval_every", "batch_size") if key in raw},
        selection_seed=(_seeds([_typed(select, "seed", int, path, "select.")], "select.seed", path)[0]
                        if "seed" in select else None),
        confirm_seeds=(_seeds(_list_of(select, "confirm_seeds", int, path, "select."), "select.confirm_seeds", path)
                       if "confirm_seeds" in select else ()),
        confirm_out=base / _typed(select, "confirm_out", str, path, "select.") if "confirm_out" in select else None,
        knobs=knobs,
        size_knobs=sizes,
        source=path,
    )
    for variant in variants:  # every spec checks size, variant, lr and lengths before anything trains
        for lr in lrs[variant]:
            try:
                experiment.spec(variant, lr, seeds[0])
            except ParameterError as error:  # named by the spec's field: the TOML key of the learning rate differs
                key = error.parameter
                if key == "lr":
                    key = "lrs" if isinstance(raw["lrs"], list) else f"lrs.{variant}"
                raise InputError(f"{path}: {key}: {error.detail}") from None
            except InputError as error:
                raise InputError(f"{path}: {error}") from None
    return experiment


def _typed(table: dict, key: str, kind: type, path: Path, prefix: str = ""):
    value = table[key]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise InputError(f"{path}: {prefix}{key} must be {_KIND_NAMES[kind]}, got {value!r}")
    return value


def _seeds(seeds: list[int], key: str, path: Path) -> tuple[int, ...]:
    """`seeds` checked as seeds (0..2**63 - 1); a bad one is an InputError naming the file and `key`."""
    try:
        return tuple(check_seed(seed, key) for seed in seeds)
    except ParameterError as error:
        raise InputError(f"{path}: {error}") from None


def _eval_sets(raw: dict, path: Path) -> tuple[str, ...]:
    """The evaluation sets of every run: names of the data directory's sets, `dev` among them."""
    eval_sets = tuple(_list_of(raw, "eval_sets", str, path))
    unknown = [name for name in eval_sets if name not in EVAL_SET_NAMES]
    if unknown:
        raise InputError(f"{path}: eval_sets: unknown evaluation set(s) {', '.join(map(repr, unknown))} "
                         f"(choose from {', '.join(EVAL_SET_NAMES)})")
    if "dev" not in eval_sets:
        raise InputError(f"{path}: eval_sets must include 'dev' (learning-rate selection reads it)")
    return eval_sets


def _list_of(table: dict, key: str, kind: type, path: Path, prefix: str = "") -> list:
    values = table[key]
    if not isinstance(values, list) or not values:
        raise InputError(f"{path}: {prefix}{key} must be a non-empty list")
    checked = [_typed({key: value}, key, kind, path, prefix) for value in values]
    if len(set(checked)) != len(checked):
        raise InputError(f"{path}: {prefix}{key} lists a value twice")
    return checked


def _size_knobs(raw: object, size: str, given: dict, path: Path) -> dict:
    """The checked knobs of the experiment's size: its [sizes.NAME] table (every table checked) and `given`."""
    if not isinstance(raw, dict) or not all(isinstance(table, dict) for table in raw.values()):
        raise InputError(f"{path}: sizes must be [sizes.NAME] tables of size knobs")
    tables = {name: dict(table) for name, table in raw.items()}
    tables[size] = {**tables.get(size, {}), **given}
    checked = {}
    for name, table in tables.items():
        try:
            checked[name] = resolve_size(name, table)[1]
        except ParameterError as error:
            raise InputError(f"{path}: config: {error.detail}") from None
        except InputError as error:
            raise InputError(f"{path}: [sizes.{name}] {error}") from None
    return checked[size]


def _variants(raw: object, size: str, size_knobs: dict, path: Path) -> tuple[tuple[str, ...], dict]:
    """The variant names in order and the knobs of the new ones, checked at `size`, from a list of preset
    names or from [variants.NAME] tables of knobs."""
    if isinstance(raw, list):
        tables: dict = {name: {} for name in _list_of({"variants": raw}, "variants", str, path)}
    elif isinstance(raw, dict) and raw and all(isinstance(table, dict) for table in raw.values()):
        tables = raw
    else:
        raise InputError(f"{path}: variants must be a non-empty list of preset names or [variants.NAME] tables")
    knobs = {}
    for name, table in tables.items():
        try:
            knobs[name] = resolve_variant(size, name, table, size_knobs)[1]
        except ParameterError as error:
            where = f"[variants.{name}] variant" if raw is tables else "variants"
            raise InputError(f"{path}: {where}: {error.detail}") from None
        except InputError as error:
            raise InputError(f"{path}: {f'[variants.{name}] ' if raw is tables else ''}{error}") from None
    return tuple(tables), {name: checked for name, checked in knobs.items() if checked}


def _check_rate_directories(lrs: dict[str, tuple[float, ...]], shared_list: bool, path: Path) -> None:
    """No two rates of one variant train into one directory (`shared_list`: the rates are one `lrs` list)."""
    for variant, rates in lrs.items():
        directories: dict[str, float] = {}
        for lr in rates:
            other = directories.setdefault(lr_directory_name(lr), lr)
            if other != lr:
                key = "lrs" if shared_list else f"lrs.{variant}"
                raise InputError(f"{path}: {key}: {other!r} and {lr!r} share the run directory name "
                                 f"{lr_directory_name(lr)} (rates are named to six significant digits); give rates "
                                 "that differ there")


def _learning_rates(raw: object, variants: tuple[str, ...], path: Path) -> dict:
    if isinstance(raw, list):
        rates = tuple(_list_of({"lrs": raw}, "lrs", float, path))
        return {variant: rates for variant in variants}
    if not isinstance(raw, dict):
        raise InputError(f"{path}: lrs must be a list or a table of lists per variant")
    missing = [variant for variant in variants if variant not in raw]
    extra = sorted(set(raw) - set(variants))
    if missing or extra:
        raise InputError(f"{path}: lrs must name exactly the variants (missing {missing}, not a variant {extra})")
    return {variant: tuple(_list_of(raw, variant, float, path, "lrs.")) for variant in variants}


def experiment_toml(experiment: Experiment, relative_to: Path) -> str:
    """The experiment as TOML text, with paths relative to the directory the file will live in."""
    def path(value: Path) -> str:
        return json.dumps(os.path.relpath(Path(value).resolve(), Path(relative_to).resolve()))

    def array(values) -> str:
        return "[" + ", ".join(json.dumps(value) for value in values) + "]"

    lines = [f"name = {json.dumps(experiment.name)}", f"data = {path(experiment.data)}",
             f"config = {json.dumps(experiment.size)}",
             *([] if experiment.knobs else [f"variants = {array(experiment.variants)}"]),
             f"seeds = {array(experiment.seeds)}", f"eval_sets = {array(experiment.eval_sets)}",
             f"out = {path(experiment.out)}"]
    lines += [f"{key} = {getattr(experiment, key)}" for key in ("updates", "warmup", "eval_every", "batch_size")
              if getattr(experiment, key) is not None]
    lines += ["", "[lrs]"] + [f"{json.dumps(variant)} = {array(experiment.lrs[variant])}"
                              for variant in experiment.variants]
    if experiment.size_knobs:
        lines += ["", f"[sizes.{json.dumps(experiment.size)}]"] + [f"{name} = {json.dumps(value)}"
                                                                  for name, value in experiment.size_knobs.items()]
    if experiment.knobs:  # new variants: every variant as a table, in order
        for variant in experiment.variants:
            knobs = experiment.knobs.get(variant, {})
            lines += ["", f"[variants.{json.dumps(variant)}]"] + [f"{name} = {json.dumps(value)}"
                                                                  for name, value in knobs.items()]
    return "\n".join(lines) + "\n"


def write_experiment(path: str | Path, experiment: Experiment) -> None:
    write_text_atomic(path, experiment_toml(experiment, Path(path).parent))
