"""The long run of tests/io/test_fuzz_lossfiles.py: many more malformed loss files through `gatedv bootstrap`, each
of which must end in exit 2 and exactly one `error:` line naming the file (no traceback, no warning, nothing
written). Prints how many examples of each malformation ran and the time per example.

    python bench/fuzz_lossfiles.py --examples 5000 --seed 1
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

from hypothesis import HealthCheck, given, seed, settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the strategies and the property
import test_fuzz_lossfiles as fuzz  # type: ignore[import-not-found]  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=5000, help="Malformed files to try.")
    parser.add_argument("--seed", type=int, default=1, help="Hypothesis seed (same seed, same files).")
    args = parser.parse_args()
    kinds: collections.Counter = collections.Counter()

    @seed(args.seed)
    @settings(max_examples=args.examples, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(fuzz.malformed_loss_files())
    def property_holds(drawn) -> None:
        case, through_directory = drawn
        kinds[(case.family, case.fmt, "directory" if through_directory else "file")] += 1
        fuzz.check_one_error_line(case, through_directory)

    began = time.perf_counter()
    property_holds()
    seconds = time.perf_counter() - began
    total = sum(kinds.values())
    print(f"{total} malformed loss files (seed {args.seed}), every one exit 2 with one error line naming it; "
          f"{seconds:.1f} s, {1000 * seconds / total:.1f} ms per file")
    for (kind, fmt, named), count in sorted(kinds.items()):
        print(f"  {kind:<18} {fmt:<8} {named:<10} {count:>6}")


if __name__ == "__main__":
    main()
