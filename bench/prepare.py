"""Throughput of `gatedv prepare` on the embedded corpus, against the tokenizer's own batch encoding.

    python bench/prepare.py [--repeats 1]

Prints, for builtin:python-stdlib: the wall time and tokens/s of a full `prepare` (tokenizer training,
evaluation sets, training store, manifest), the time of a reusing second call, and — as the peer — the
tokens/s of `Tokenizer.encode_batch_fast` alone over the same documents with the same tokenizer (the floor of
any pipeline that tokenises this corpus), with the ratio prepare / encode-only.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
import warnings

from tokenizers import Tokenizer

from trainer.data.corpus import BUILTIN_STDLIB, open_corpus
from trainer.data.prepare import prepare
from trainer.data.split import PrepareWarning


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1, help="timed prepare runs (the best is reported)")
    args = parser.parse_args()
    warnings.simplefilter("ignore", PrepareWarning)  # the cap is expected on this corpus
    with tempfile.TemporaryDirectory() as tmp:
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            result = prepare(BUILTIN_STDLIB, tmp, eval_docs=2048, force=True, progress=False)
            times.append(time.perf_counter() - start)
        start = time.perf_counter()
        reused = prepare(BUILTIN_STDLIB, tmp, eval_docs=2048, progress=False)
        reuse_s = time.perf_counter() - start
        assert reused.reused
        tokenizer = Tokenizer.from_file(os.path.join(tmp, "tokenizer.json"))
    texts = [document.text for document in open_corpus(BUILTIN_STDLIB).documents()]
    start = time.perf_counter()
    encoded = tokenizer.encode_batch_fast(texts, add_special_tokens=False)
    encode_s = time.perf_counter() - start
    tokens = result.manifest["counts"]["tokens"]
    assert sum(len(encoding.ids) for encoding in encoded) == tokens
    best = min(times)
    print(f"machine: {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"load average {os.getloadavg()[0]:.1f} at the end")
    print(f"corpus: {BUILTIN_STDLIB}, {result.manifest['counts']['documents']:,} documents, {tokens:,} tokens")
    print(f"prepare (train BPE + split + store + manifest): {best:.2f} s, {tokens / best:,.0f} tokens/s")
    print(f"prepare again (reuse): {reuse_s:.3f} s")
    print(f"peer, encode_batch_fast only: {encode_s:.2f} s, {tokens / encode_s:,.0f} tokens/s")
    print(f"ratio prepare / encode-only time: {best / encode_s:.2f}")


if __name__ == "__main__":
    main()
