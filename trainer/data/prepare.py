"""`prepare(corpus, out)`: tokenizer, domain-disjoint evaluation sets, training token store and manifest
(docs/method.md §3).

The corpus is read once before `out` is touched; everything but the manifest is written into
`out/.prepare-staging` (the passes over the corpus: `trainer.data.split`) and renamed into place only when all of
it is written, the manifest last. A directory prepared from the same inputs is reused as it is.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from gatedv_stats.core.atomic import atomic_path, write_text_atomic
from gatedv_stats.core.errors import InputError
from gatedv_stats.core.files import file_sha256
from gatedv_stats.core.integrity import sealed
from gatedv_stats.core.outputs import check_output_dir, check_path_given, cleaned_on_failure
from trainer.data.corpus import Corpus, open_corpus
from trainer.data.prepared import (
    DATA_FORMAT,
    DEFAULT_CONTEXT,
    EVAL_SET_NAMES,
    MANIFEST,
    TOKENIZER,
    TRAIN_OFFSETS,
    TRAIN_TOKENS,
)
from trainer.data.recorded import MANIFEST_SEAL, check_manifest, check_recorded_file
from trainer.data.split import Preparation
from trainer.data.tokenizer import DEFAULT_VOCAB_SIZE, check_vocab_size, load_tokenizer, save_tokenizer

DEFAULT_EVAL_DOCS = 2048
MAX_CONTEXT = 1 << 20  # windows of up to a million tokens
# Everything but the manifest is written here first and renamed into place only when all of it is written.
_STAGING = ".prepare-staging"
_DATA_FILES = (TOKENIZER, TRAIN_TOKENS, TRAIN_OFFSETS, *(f"{name}.parquet" for name in EVAL_SET_NAMES))


@dataclass(frozen=True)
class PrepareResult:
    path: Path
    manifest: dict
    reused: bool

    def to_dict(self) -> dict:
        return {"path": str(self.path), "reused": self.reused, "manifest": self.manifest}

    def summary(self) -> str:
        counts, train = self.manifest["counts"], self.manifest["counts"]["train"]
        sets = self.manifest["eval_sets"]
        lines = [
            f"{'reused' if self.reused else 'prepared'} {self.path} from {self.manifest['corpus']['spec']}",
            f"corpus: {counts['documents']:,} documents, {counts['tokens']:,} tokens, "
            f"{counts['domain_groups']:,} domain groups ({counts['undecodable_documents']:,} undecodable, "
            f"{counts['empty_documents']:,} empty documents skipped)",
            f"tokenizer: {self.manifest['tokenizer']['vocab_size']:,} entries, sha256 "
            f"{self.manifest['tokenizer']['sha256'][:12]}",
            *(f"{name}: {sets[name]['documents']:,} documents from distinct domain groups, "
              f"{sets[name]['target_bytes']:,} target bytes, sha256 {sets[name]['sha256'][:12]}"
              for name in EVAL_SET_NAMES),
            f"train: {train['documents']:,} documents, {train['tokens']:,} tokens, "
            f"{train['eligible_windows']:,} eligible windows of {self.manifest.get('context', DEFAULT_CONTEXT) + 1:,} "
            f"tokens ({counts['excluded_documents']:,} documents excluded)",
        ]
        return "\n".join(lines)


def prepare(corpus: str, out: str | os.PathLike, *, eval_docs: int = DEFAULT_EVAL_DOCS, split_seed: int = 0,
            tokenizer: str | None = None, vocab_size: int = DEFAULT_VOCAB_SIZE, remove_eval_groups: bool = True,
            on_decode_error: str = "skip", max_docs: int | None = None, batch_size: int = 512,
            force: bool = False, progress: bool = True, context: int = DEFAULT_CONTEXT) -> PrepareResult:
    """Prepare `corpus` into the data directory `out`; reuse it when the inputs are unchanged (unless `force`).

    `context`: tokens per window a model sees (evaluation windows and training windows are `context` + 1 tokens
    long; the manifest records it and a run whose model has another context is refused).

    `tokenizer`: an existing `tokenizer.json` (its size checked against `vocab_size`), or a corpus spec whose
    text trains the BPE; default: the training split of `corpus`.
    """
    if eval_docs < 1:
        raise InputError(f"--eval-docs: must be at least 1, got {eval_docs}")
    if split_seed < 0:
        raise InputError(f"--split-seed: must be a non-negative integer, got {split_seed}")
    check_vocab_size(vocab_size)
    if isinstance(context, bool) or not isinstance(context, int) or not 1 <= context <= MAX_CONTEXT:
        raise InputError(f"--context: must be an integer from 1 to {MAX_CONTEXT:,}, got {context!r}")
    check_output_dir(out, "--out")
    out = Path(out)
    source = open_corpus(corpus, on_decode_error=on_decode_error, max_docs=max_docs)
    tokenizer_source = _tokenizer_source(tokenizer, on_decode_error)
    # The default context is left out, so that a directory prepared before --context existed is reused.
    windows = {} if context == DEFAULT_CONTEXT else {"context": context}
    fingerprint = _fingerprint(source, tokenizer_source, eval_docs=eval_docs, split_seed=split_seed,
                               vocab_size=vocab_size, remove_eval_groups=remove_eval_groups, **windows)
    if not force:
        previous = _reusable_manifest(out, fingerprint)
        if previous is not None:
            return PrepareResult(out, previous, reused=True)

    _check_replaceable(out)
    staging = out / _STAGING
    run = Preparation(source, staging, split_seed, batch_size, progress, window=context + 1)
    # The corpus is read once before the directory is touched, so a corpus that cannot be read changes nothing.
    run.read_metadata()
    try:
        n_per_set = run.choose_candidates(eval_docs)
    except InputError as error:  # too few documents: what was passed over may be why
        raise InputError("; ".join([str(error), *run.warnings])) from None
    with cleaned_on_failure(out):  # a failed preparation leaves nothing new behind
        try:
            shutil.rmtree(staging, ignore_errors=True)  # the leftover of a killed preparation
            staging.mkdir()
            manifest = _prepare_into(run, tokenizer_source, fingerprint, n_per_set, eval_docs=eval_docs,
                                     vocab_size=vocab_size, remove_eval_groups=remove_eval_groups)
            _move_into_place(staging, out, manifest)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return PrepareResult(out, manifest, reused=False)


def _check_replaceable(out: Path) -> None:
    """Every file `prepare` writes into `out` is absent or a regular file (a directory there is not replaced)."""
    for name in _DATA_FILES:
        path = out / name
        if path.exists() and not path.is_file():
            raise InputError(f"--out: {path} exists and is not a regular file; it is not replaced")


def _move_into_place(staging: Path, out: Path, manifest: dict) -> None:
    """Rename the files written in `staging` into `out`, the manifest last and atomically.

    The old manifest goes first, so a directory caught between its old and new files never looks prepared.
    A symbolic link is written through, as `atomic_path` does (copied when it leads to another file system).
    """
    (out / MANIFEST).unlink(missing_ok=True)
    for name in _DATA_FILES:
        target = Path(os.path.realpath(out / name))
        try:
            os.replace(staging / name, target)
        except OSError as error:
            if error.errno != errno.EXDEV:
                raise
            with atomic_path(target) as tmp:
                shutil.copyfile(staging / name, tmp)
    write_text_atomic(out / MANIFEST, json.dumps(sealed(manifest, MANIFEST_SEAL), indent=2, sort_keys=True) + "\n")


def _prepare_into(run: Preparation, tokenizer_source: Path | Corpus | None, fingerprint: str, n_per_set: int, *,
                  eval_docs: int, vocab_size: int, remove_eval_groups: bool) -> dict:
    """Write the tokenizer, evaluation sets and training store into `run.out` (the staging directory); the
    manifest."""
    out = run.out
    if isinstance(tokenizer_source, Path):
        bpe = load_tokenizer(tokenizer_source, vocab_size)
        tokenizer_info = {"source": "given", "file": tokenizer_source.name}
    else:
        bpe, trained_on = run.train_tokenizer(vocab_size, tokenizer_source)
        tokenizer_info = {"source": tokenizer_source.spec if tokenizer_source else "training split",
                          "documents": trained_on}
    tokenizer_sha256 = save_tokenizer(bpe, out / TOKENIZER)
    manifest = run.tokenize_and_split(bpe, tokenizer_sha256, n_per_set, eval_docs, remove_eval_groups)
    manifest["tokenizer"] = {"vocab_size": vocab_size, "sha256": tokenizer_sha256, "file": TOKENIZER,
                             **tokenizer_info}
    manifest["input_fingerprint"] = fingerprint
    manifest["context"] = run.window - 1
    return {"format": DATA_FORMAT, **manifest}


def _tokenizer_source(tokenizer: str | None, on_decode_error: str) -> Path | Corpus | None:
    if tokenizer is None:
        return None
    check_path_given(tokenizer, "--tokenizer")
    if tokenizer.endswith(".json"):
        path = Path(tokenizer)
        if not path.is_file():
            raise InputError(f"{tokenizer}: no such tokenizer file")
        return path
    return open_corpus(tokenizer, on_decode_error=on_decode_error)


def _fingerprint(source: Corpus, tokenizer_source: Path | Corpus | None, **options) -> str:
    tokenizer_part: dict | None
    if isinstance(tokenizer_source, Path):
        tokenizer_part = {"file_sha256": file_sha256(tokenizer_source)}
    elif tokenizer_source is not None:
        tokenizer_part = {"corpus": tokenizer_source.fingerprint_parts()}
    else:
        tokenizer_part = None
    parts = {"format": DATA_FORMAT, "corpus": source.fingerprint_parts(), "tokenizer": tokenizer_part, **options}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode("utf-8")).hexdigest()


def _reusable_manifest(out: Path, fingerprint: str) -> dict | None:
    try:
        manifest = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    if not isinstance(manifest, dict) or manifest.get("input_fingerprint") != fingerprint:
        return None
    files = [TOKENIZER, TRAIN_OFFSETS, *(f"{name}.parquet" for name in EVAL_SET_NAMES)]
    if not all((out / name).is_file() for name in files):
        return None
    train = out / TRAIN_TOKENS
    if not train.is_file() or train.stat().st_size != 2 * manifest["counts"]["train"]["tokens"]:
        return None
    try:  # a damaged directory is prepared again
        manifest = check_manifest(manifest, out / MANIFEST)
        for name, sha256 in ((TOKENIZER, manifest["tokenizer"]["sha256"]), (TRAIN_TOKENS, manifest["train"]["sha256"]),
                             (TRAIN_OFFSETS, manifest["train"].get("offsets_sha256"))):
            check_recorded_file(out, out / MANIFEST, name, sha256)
    except InputError:
        return None
    return manifest


__all__ = ["DEFAULT_EVAL_DOCS", "PrepareResult", "prepare"]
