"""The Examples of the Python API's docstrings run as they are shown (numpydoc Examples sections, doctest)."""

from __future__ import annotations

import doctest

import pytest

import gatedv_stats as gv
from gatedv_stats import api, decide, ledger
from gatedv_stats.testing import example_study

PUBLIC = ["load", "pair", "compare", "analyze", "arms", "plan", "report", "noise_floor", "sequential", "Ledger"]
EXAMPLES = {test.name.rsplit(".", 1)[-1]: test for module in (api, decide, ledger)
            for test in doctest.DocTestFinder().find(module) if test.name.rsplit(".", 1)[-1] in PUBLIC}


def test_every_public_function_has_an_examples_section():
    for name in PUBLIC:
        docstring = getattr(gv, name).__doc__
        assert "Examples\n    --------" in docstring, name
        assert EXAMPLES.get(name) is not None and EXAMPLES[name].examples, name


@pytest.mark.parametrize("name", PUBLIC)
def test_the_examples_run_as_shown(name, tmp_path):
    test = EXAMPLES[name]
    test.globs.update({"gv": gv, "example_study": example_study, "tmp_dir": tmp_path})
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test, out=lambda text: pytest.fail(text))
    assert runner.summarize(verbose=False).failed == 0
