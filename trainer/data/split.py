"""The passes of `prepare` over the corpus (docs/method.md §3): document metadata, the tokenizer, the training token
store and the domain-disjoint evaluation sets, written into the staging directory.

The corpus is streamed three times and never held whole:

1. metadata: each document's domain group and UTF-8 length;
2. tokenizer training (unless a tokenizer is given) on every document outside the *candidate* groups —
   the groups, in an order fixed by the split seed, from which the evaluation documents will be drawn;
3. tokenisation in parallel batches: documents outside the candidate groups go straight into the training
   store, those inside wait in a side store until the evaluation documents are chosen.

A document is eligible for evaluation when it has at least a window's tokens (context + 1, 257 by default); each
candidate group (in seeded order) that holds one contributes one, chosen by the split seed, first to `dev` and then
to `heldout`. A drawn document whose window boundaries fall inside a multi-byte character (so that no exact window
text exists) is passed over and another drawn from the rest of its group. The chosen documents (and by default their
whole groups) stay out of the training store; unused candidate groups join it.
"""

from __future__ import annotations

import math
import sys
import warnings
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import numpy as np
from tqdm import tqdm

from gatedv_stats import __version__
from gatedv_stats.core.atomic import atomic_file
from gatedv_stats.core.errors import InputError
from trainer.data.corpus import Corpus, ReadCounts
from trainer.data.prepared import EVAL_SET_NAMES, TRAIN_OFFSETS, TRAIN_TOKENS, WINDOW, window_texts, write_eval_set
from trainer.data.token_store import SplitStore
from trainer.data.tokenizer import encode_batch, token_bytes, train_tokenizer

# Candidate groups beyond the 2N needed, for groups whose long-looking documents turn out shorter than 257 tokens.
_CANDIDATE_SLACK = 1.25
_CANDIDATE_EXTRA = 8
# An evaluation set takes at most this share of the eligible groups, so that half of them remain for training.
_MAX_GROUP_SHARE = 4
_SPLIT_STREAM = 0x53504C54


class PrepareWarning(UserWarning):
    """The evaluation sets were made smaller than asked (too few domain groups)."""


class Preparation:
    """The state carried between the passes of one `prepare` call."""

    def __init__(self, source: Corpus, out: Path, split_seed: int, batch_size: int, progress: bool,
                 window: int = WINDOW) -> None:
        self.source, self.out, self.split_seed, self.window = source, out, split_seed, window
        self.batch_size, self.progress = batch_size, progress
        self.rng = np.random.default_rng([split_seed, _SPLIT_STREAM])
        self.warnings: list[str] = []

    def _bar(self, **kwargs) -> tqdm:
        # disable=None: bars only on a terminal, so logs and error output stay clean; leave=False clears them.
        return tqdm(file=sys.stderr, disable=None if self.progress else True, leave=False, dynamic_ncols=True,
                    **kwargs)

    # pass 1
    def read_metadata(self) -> None:
        group_code: dict[str, int] = {}
        codes, sizes = [], []
        self.read_counts = ReadCounts()
        if self.source.passed_over:
            self._warn(f"{self.source.spec}: read only the .txt files of the directory; "
                       f"{self.source.passed_over} other file(s) passed over")
        with self._bar(desc="reading corpus", unit=" doc") as bar:
            for batch in self.source.batches(self.batch_size, self.read_counts):
                for document in batch:
                    codes.append(group_code.setdefault(document.domain, len(group_code)))
                    sizes.append(len(document.text.encode("utf-8")))
                bar.update(len(batch))
        if not codes:
            raise InputError(f"{self.source.spec}: the corpus holds no document ({self.read_counts.empty} empty, "
                             f"{self.read_counts.undecodable} undecodable skipped)")
        self.group_names = sorted(group_code, key=group_code.__getitem__)
        self.doc_group = np.asarray(codes, dtype=np.int64)
        self.doc_bytes = np.asarray(sizes, dtype=np.int64)

    def choose_candidates(self, eval_docs: int) -> int:
        """Order the groups that may hold an eligible document by the split seed; return N per set (capped)."""
        n_groups = len(self.group_names)
        longest = np.zeros(n_groups, dtype=np.int64)
        np.maximum.at(longest, self.doc_group, self.doc_bytes)
        # Tokens never outnumber bytes, so a group whose documents are all shorter than a window in bytes has none.
        possible = np.flatnonzero(longest >= self.window)
        possible = possible[np.argsort([self.group_names[g] for g in possible], kind="stable")]
        order = possible[self.rng.permutation(len(possible))]
        cap = len(order) // _MAX_GROUP_SHARE
        if cap < 1:
            raise InputError(f"{self.source.spec}: only {len(order)} domain group(s) hold a document of at least "
                             f"{self.window} bytes; the evaluation sets need at least {_MAX_GROUP_SHARE} such groups")
        n_per_set = min(eval_docs, cap)
        if n_per_set < eval_docs:
            self._warn(f"{self.source.spec}: only {len(order)} domain groups can hold an evaluation document and "
                       f"each set takes at most a quarter of them; evaluation sets capped at {n_per_set} documents "
                       f"each (asked for {eval_docs})")
        # At most half of the groups become candidates: the rest train the tokenizer (2N <= half by the cap).
        n_candidates = min(len(order) // 2, math.ceil(2 * n_per_set * _CANDIDATE_SLACK) + _CANDIDATE_EXTRA)
        self.candidate_order = order[:n_candidates]
        self.is_candidate_group = np.zeros(n_groups, dtype=bool)
        self.is_candidate_group[self.candidate_order] = True
        return n_per_set

    # pass 2
    def train_tokenizer(self, vocab_size: int, text_corpus: Corpus | None):
        """BPE trained on `text_corpus`, or on every document outside the candidate groups; (tokenizer, documents)."""
        if text_corpus is not None:
            texts: Iterator[str] = (document.text for document in text_corpus.documents())
            spec, length = text_corpus.spec, None
        else:
            texts = self._training_split_texts()
            spec = f"{self.source.spec} (training split)"
            length = int((~self.is_candidate_group[self.doc_group]).sum())
        counted = _Counter(texts)
        with self._bar(desc="training tokenizer", unit=" doc", total=length) as bar:
            bpe = train_tokenizer(_progress(counted, bar), vocab_size, source=spec, length=length)
        return bpe, counted.count

    def _training_split_texts(self) -> Iterator[str]:
        index = 0
        for batch in self.source.batches(self.batch_size):
            for document in batch:
                if not self.is_candidate_group[self.doc_group[index]]:
                    yield document.text
                index += 1

    # pass 3
    def tokenize_and_split(self, bpe, tokenizer_sha256: str, n_per_set: int, eval_docs: int,
                           remove_eval_groups: bool) -> dict:
        """Tokenize the corpus, choose and write the evaluation sets, write the training store; the manifest."""
        side_path = self.out / ".candidate-groups.bin.tmp"
        try:
            with atomic_file(self.out / TRAIN_TOKENS) as train_file, open(side_path, "w+b") as side_file:
                store = SplitStore(train_file, side_file, side_path)
                n_tokens = self._tokenize(bpe, store)
                side = store.candidate_tokens()
                window_text = partial(_window_text, store, side, token_bytes(bpe), self.window)
                chosen = self._choose_eval_docs(store.side_docs, n_tokens, n_per_set, eval_docs, window_text)
                eval_sets = self._write_eval_sets(chosen, side, store, window_text, tokenizer_sha256)
                excluded = self._excluded(chosen, remove_eval_groups)
                store.keep_candidates(side, excluded)
                del side, window_text  # the memory map of the candidates' tokens closes here
                windows = int(np.maximum(store.train_lengths() - self.window + 1, 0).sum())
                if windows == 0:
                    raise InputError(f"{self.source.spec}: no training document of at least {self.window} tokens "
                                     "remains after removing the evaluation documents")
                train_file.flush()
            with atomic_file(self.out / TRAIN_OFFSETS) as offsets_file:
                np.save(offsets_file, np.asarray(store.train_offsets, dtype=np.int64))
        finally:
            side_path.unlink(missing_ok=True)
        manifest = self._manifest(n_tokens, store, excluded, windows, eval_sets, eval_docs, remove_eval_groups)
        manifest["train"].update(sha256=train_file.sha256, offsets_sha256=offsets_file.sha256)  # hashed as written
        return manifest

    def _tokenize(self, bpe, store: SplitStore) -> np.ndarray:
        """Tokenize every document in parallel batches into `store`; returns each document's token count."""
        n_docs = len(self.doc_group)
        n_tokens = np.zeros(n_docs, dtype=np.int64)
        index = 0
        with self._bar(desc="tokenizing", unit=" doc", total=n_docs, position=0) as doc_bar, \
                self._bar(desc="tokens", unit=" tok", unit_scale=True, position=1) as token_bar:
            for batch in self.source.batches(self.batch_size):
                for document, ids in zip(batch, encode_batch(bpe, [document.text for document in batch])):
                    array = np.asarray(ids, dtype=np.uint16)
                    n_tokens[index] = len(array)
                    if self.is_candidate_group[self.doc_group[index]]:
                        store.add_candidate(index, array, document.doc_id, document.domain)
                    else:
                        store.add_training(index, array)
                    index += 1
                doc_bar.update(len(batch))
                token_bar.update(int(n_tokens[index - len(batch):index].sum()))
        if index != n_docs:
            raise InputError(f"{self.source.spec}: the corpus changed while being read "
                             f"({index} documents now, {n_docs} before)")
        return n_tokens

    def _manifest(self, n_tokens: np.ndarray, store: SplitStore, excluded: np.ndarray, windows: int,
                  eval_sets: dict, eval_docs: int, remove_eval_groups: bool) -> dict:
        counts = self.read_counts
        eligible = n_tokens >= self.window
        return {
            "corpus": {"spec": self.source.spec, "listing_sha256": self.source.listing_sha256,
                       "files": len(self.source.listing), "on_decode_error": self.source.on_decode_error,
                       "max_docs": self.source.max_docs},
            "python_version": self.source.python_version,
            "gatedv_version": __version__,
            "split_seed": self.split_seed,
            "eval_docs_requested": eval_docs,
            "remove_eval_groups": remove_eval_groups,
            "warnings": self.warnings,
            "counts": {
                "documents": len(n_tokens),
                "tokens": int(n_tokens.sum()),
                "domain_groups": len(self.group_names),
                "eligible_documents": int(eligible.sum()),
                "eligible_domain_groups": int(len(np.unique(self.doc_group[eligible]))),
                "undecodable_documents": counts.undecodable,
                "empty_documents": counts.empty,
                "excluded_documents": int(excluded.sum()),
                "eval_draws_splitting_a_character": self.split_windows,
                "train": {"documents": len(store.train_docs), "tokens": int(store.train_offsets[-1]),
                          "eligible_documents": int((store.train_lengths() >= self.window).sum()),
                          "eligible_windows": windows},
            },
            "eval_sets": {name: {"file": f"{name}.parquet", **eval_set.to_dict()}
                          for name, eval_set in eval_sets.items()},
            "train": {"tokens_file": TRAIN_TOKENS, "offsets_file": TRAIN_OFFSETS, "dtype": "uint16"},
        }

    def _choose_eval_docs(self, side_docs: list[int], n_tokens: np.ndarray, n_per_set: int, eval_docs: int,
                          window_text: Callable[[int], tuple[str, str] | None]) -> list[int]:
        """Document indices: the first N for dev, the next N for held-out, one per candidate group in seeded order.

        A drawn document whose window has no exact text (a boundary inside a character) is passed over and the
        draw repeated among the rest of its group, so the choice stays uniform over the usable documents.
        """
        eligible_by_group: dict[int, list[int]] = {}
        for index in side_docs:
            if n_tokens[index] >= self.window:
                eligible_by_group.setdefault(int(self.doc_group[index]), []).append(index)
        chosen = []
        self.split_windows = 0
        for group in self.candidate_order:
            members = list(eligible_by_group.get(int(group), ()))
            while members:
                drawn = members.pop(int(self.rng.integers(len(members))))
                if window_text(drawn) is not None:
                    chosen.append(drawn)
                    break
                self.split_windows += 1
            if len(chosen) == 2 * n_per_set:
                break
        if len(chosen) < 2:
            raise InputError(f"{self.source.spec}: fewer than 2 domain groups hold a document of at least "
                             f"{self.window} tokens; the development and held-out sets need one each")
        if len(chosen) < 2 * n_per_set:
            n_per_set = len(chosen) // 2
            self._warn(f"{self.source.spec}: only {len(chosen)} candidate domain groups hold a document of at least "
                       f"{self.window} tokens; evaluation sets capped at {n_per_set} documents each (asked for "
                       f"{eval_docs})")
        return chosen[:2 * n_per_set]

    def _write_eval_sets(self, chosen: list[int], side: np.ndarray, store: SplitStore,
                         window_text: Callable[[int], tuple[str, str] | None], tokenizer_sha256: str) -> dict:
        side_names = store.side_names
        doc_ids = [side_names[index][0] for index in chosen]
        if len(set(doc_ids)) != len(doc_ids):
            raise InputError(f"{self.source.spec}: evaluation documents share `id` values "
                             f"({len(doc_ids) - len(set(doc_ids))} duplicates); document ids must be unique")
        n_per_set = len(chosen) // 2
        eval_sets = {}
        for set_number, name in enumerate(EVAL_SET_NAMES):
            members = chosen[set_number * n_per_set:(set_number + 1) * n_per_set]
            tokens = np.stack([store.candidate_window(side, i, self.window) for i in members]).astype(np.int64)
            contexts, targets = zip(*(window_text(i) for i in members))
            eval_sets[name] = write_eval_set(self.out / f"{name}.parquet", name,
                                             [side_names[i][0] for i in members], [side_names[i][1] for i in members],
                                             tokens, [len(target.encode("utf-8")) for target in targets],
                                             (list(contexts), list(targets)), tokenizer_sha256=tokenizer_sha256)
        return eval_sets

    def _excluded(self, chosen: list[int], remove_eval_groups: bool) -> np.ndarray:
        excluded = np.zeros(len(self.doc_group), dtype=bool)
        excluded[chosen] = True
        if remove_eval_groups:
            excluded |= np.isin(self.doc_group, self.doc_group[chosen])
        return excluded

    def _warn(self, message: str) -> None:
        self.warnings.append(message)
        warnings.warn(message, PrepareWarning, stacklevel=3)


class _Counter:
    """An iterator that counts what it yields."""

    def __init__(self, items: Iterator) -> None:
        self.items, self.count = iter(items), 0

    def __iter__(self):
        return self

    def __next__(self):
        item = next(self.items)
        self.count += 1
        return item


def _window_text(store: SplitStore, side: np.ndarray, byte_table: list[bytes], window: int,
                 index: int) -> tuple[str, str] | None:
    """The exact (context, target) text of candidate document `index`'s first window; None when a window boundary
    falls inside a character."""
    return window_texts([byte_table[token] for token in store.candidate_window(side, index, window)])


def _progress(items: Iterator, bar: tqdm) -> Iterator:
    for item in items:
        bar.update(1)
        yield item
