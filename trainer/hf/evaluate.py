"""Per-document loss sums of a causal language model, written as a loss file (docs/method-statistics.md §5, "Models with
their own tokenizer"): one scoring path for a local `transformers` model directory (`evaluate_hf`, what
`gatedv evaluate --hf` runs) and for a model in memory (`trainer.hf.score`).

Two inputs:

* a data directory's evaluation set, where every model scores the same text: the target text of each window
  (the UTF-8 bytes of its 256 targets) given its context text (the first token's text). A model whose
  tokenizer is the data directory's scores the stored token ids, exactly as `gatedv evaluate` does; any
  other model's tokenizer encodes the context and the target text separately, and the target tokens are scored
  after [BOS] (when the tokenizer has one) and the context tokens;
* whole documents of any corpus `gatedv prepare` reads: [BOS] and the document, or without a BOS token the
  document's first character as context and the rest as target.

Long sequences go through a sliding window (`context`, `stride`): every target token is scored exactly once.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from tqdm import tqdm

from gatedv_stats import __version__
from gatedv_stats.core.errors import InputError, ParameterError, RunFailure
from gatedv_stats.core.validation import check_at_least, check_seed
from gatedv_stats.io.lossfiles import write_loss_file
from trainer.data.corpus import Corpus, ReadCounts, open_corpus
from trainer.data.prepared import MANIFEST, EvalSet, PreparedData
from trainer.hf.model import (
    MAX_DEFAULT_CONTEXT,
    check_dtype,
    hf_forward,
    max_positions,
    model_name,
    open_hf_model,
    vocabulary_size,
)
from trainer.hf.tokenizer import TextTokenizer, from_transformers
from trainer.run.device import is_out_of_memory, out_of_memory_as, select_device

DEFAULT_BATCH_SIZE = 8
_CORPUS_BATCH = 64  # documents encoded and scored together
STORED_IDS = "stored token ids"
Source = tuple[PreparedData, EvalSet] | Corpus


@dataclass(frozen=True)
class CausalLM:
    """A causal language model as scoring sees it."""

    name: str  # names it in errors: its directory, or its class
    forward: Callable[[torch.Tensor], torch.Tensor]  # token ids (B, T) on `device` -> logits (B, T, V)
    tokenizer: TextTokenizer
    device: torch.device
    vocabulary: int  # the token ids it takes


@dataclass
class Batching:
    """Windows per forward pass: `size`, halved each time the device runs out of memory where `halve` (the
    caller chose no size)."""

    size: int
    halve: bool

    @classmethod
    def of(cls, batch_size: int | None) -> Batching:
        if batch_size is None:
            return cls(DEFAULT_BATCH_SIZE, halve=True)
        return cls(check_at_least("batch_size", batch_size, 1), halve=False)


@dataclass(frozen=True)
class TokenSequence:
    """Token ids of which `ids[first:]` are scored, each given the ids before it (as far as a window reaches)."""

    ids: list[int]
    first: int


def token_windows(length: int, first: int, context: int, stride: int) -> Iterator[tuple[int, int, int]]:
    """(start, a, b) of each forward pass: the inputs ids[start:b-1] score the targets ids[a:b].

    The targets [first, length) are cut into consecutive chunks, the first as long as one window allows and then
    `stride` tokens each; the inputs of a chunk reach back as far as `context` ids allow. So every target is
    scored once, with all ids before it or at least `context - stride + 1` of them.
    """
    if not 1 <= first < length or not 1 <= stride <= context:
        raise ValueError(f"token_windows: need 1 <= first < length and 1 <= stride <= context, got "
                         f"first={first}, length={length}, context={context}, stride={stride}")
    a, b = first, min(length, max(context + 1, first + 1))
    while a < length:
        yield max(0, b - 1 - context), a, b
        a, b = b, min(length, b + stride)


@torch.inference_mode()
def score_sequences(forward: Callable[[torch.Tensor], torch.Tensor], sequences: list[TokenSequence], *,
                    context: int, stride: int, batching: Batching, device: torch.device,
                    bar: tqdm | None = None) -> np.ndarray:
    """Summed negative log-likelihood (nats, float64) of each sequence's scored tokens; not finite for a sequence
    where a scored position's logits are NaN or infinite (see `_score_batch`).

    Windows of similar length go through the model `batching.size` at a time, right-padded: in a causal model a
    padded position never changes the logits before it.
    """
    windows = [(k, *window) for k, sequence in enumerate(sequences)
               for window in token_windows(len(sequence.ids), sequence.first, context, stride)]
    windows.sort(key=lambda window: window[3] - 1 - window[1], reverse=True)
    sums = np.zeros(len(sequences), dtype=np.float64)
    begin = 0
    while begin < len(windows):
        batch = windows[begin:begin + batching.size]
        try:
            scored = _score_batch(forward, sequences, batch, device)
        except RuntimeError as error:
            if not (batching.halve and batching.size > 1 and is_out_of_memory(error)):
                raise
            scored = None
        if scored is None:  # out of the except block: the failed batch's tensors are released
            batching.size //= 2
            if device.type == "cuda":
                torch.cuda.empty_cache()
            continue
        owners, nll = scored
        np.add.at(sums, owners, nll)
        begin += len(batch)
        if bar is not None:
            bar.update(len(owners))
    return sums


def _score_batch(forward: Callable[[torch.Tensor], torch.Tensor], sequences: list[TokenSequence],
                 batch: list[tuple[int, int, int, int]], device: torch.device) -> tuple[np.ndarray, np.ndarray]:
    """(owning sequence, NLL) of every target token of a batch of windows (k, start, a, b). A NaN or an infinite
    logit of a position leaves its NLL NaN or infinite (a -inf one only at the target: elsewhere it is a token of
    probability zero)."""
    width = max(b - 1 - start for _, start, _, b in batch)
    inputs = torch.zeros((len(batch), width), dtype=torch.long)
    rows: list[int] = []
    positions: list[int] = []
    targets: list[int] = []
    owners: list[int] = []
    for row, (k, start, a, b) in enumerate(batch):
        ids = sequences[k].ids
        inputs[row, :b - 1 - start] = torch.as_tensor(ids[start:b - 1])
        rows += [row] * (b - a)
        positions += range(a - 1 - start, b - 1 - start)
        targets += ids[a:b]
        owners += [k] * (b - a)
    logits = forward(inputs.to(device))
    picked = logits[torch.as_tensor(rows, device=device), torch.as_tensor(positions, device=device)].float()
    log_probs = picked.log_softmax(dim=-1).gather(1, torch.as_tensor(targets, device=device)[:, None])[:, 0]
    return np.asarray(owners), (-log_probs).double().cpu().numpy()


def eval_set_sequences(lm: CausalLM, windows: EvalSet, stored_ids: bool) -> list[TokenSequence]:
    """One sequence per evaluation window: the stored ids, or [BOS] + context tokens + target tokens."""
    if stored_ids:
        return [TokenSequence(row.tolist(), 1) for row in windows.tokens]
    contexts, targets = _window_texts(windows, "a model with its own tokenizer needs")
    prefix = lm.tokenizer.bos
    sequences = []
    for doc_id, context, target in zip(windows.doc_ids, lm.tokenizer.encode(contexts), lm.tokenizer.encode(targets)):
        if not target or not prefix + context:
            raise InputError(f"{lm.name}: its tokenizer encodes the {'target' if not target else 'context'} text "
                             f"of document {doc_id} as no token, so there is nothing to score it with")
        sequences.append(TokenSequence(prefix + context + target, len(prefix) + len(context)))
    return sequences


def _window_texts(windows: EvalSet, needed_for: str) -> tuple[list[str], list[str]]:
    if windows.context_texts is None or windows.target_texts is None:
        raise InputError(f"{windows.name}: the evaluation set holds no window text (context_text, target_text), "
                         f"which {needed_for}")
    return windows.context_texts, windows.target_texts


def document_sequences(lm: CausalLM, texts: list[str]) -> tuple[list[TokenSequence | None], list[int]]:
    """Whole documents: (a sequence per document, None when nothing is left to score; target bytes each)."""
    prefix = lm.tokenizer.bos
    contexts = [""] * len(texts) if prefix else [text[:1] for text in texts]
    targets = texts if prefix else [text[1:] for text in texts]
    sequences = [TokenSequence(prefix + context + target, len(prefix) + len(context)) if target else None
                 for context, target in zip(lm.tokenizer.encode(contexts), lm.tokenizer.encode(targets))]
    return sequences, [len(target.encode("utf-8")) for target in targets]


@dataclass(frozen=True)
class HFEvaluation:
    """One `transformers` model scored on an evaluation set or a corpus."""

    out: str
    arm: str
    seed: int
    model: str
    eval_set: str
    scored_as: str
    n_docs: int
    skipped_docs: int
    n_targets: int
    n_bytes: int
    loss_sum: float
    tokenizer_sha256: str

    def to_dict(self) -> dict:
        return {**self.__dict__, "nll_per_target": self.loss_sum / self.n_targets,
                "bits_per_byte": self.loss_sum / (math.log(2) * self.n_bytes)}

    def summary(self) -> str:
        skipped = f" ({self.skipped_docs} without a token to score skipped)" if self.skipped_docs else ""
        return (f"{self.arm} seed {self.seed} ({self.model}) on {self.eval_set}: {self.n_docs} documents{skipped}, "
                f"{self.n_targets:,} tokens of its tokenizer, {self.n_bytes:,} bytes; NLL per token "
                f"{self.loss_sum / self.n_targets:.6f}, bits per byte "
                f"{self.loss_sum / (math.log(2) * self.n_bytes):.6f} -> {self.out}")


def evaluate_hf(model_dir: str | os.PathLike, data: str | os.PathLike, out: str | Path, *,
                eval_set: str | None = None, arm: str | None = None, seed: int | None = None,
                dtype: str | None = None, device: str = "auto", batch_size: int | None = None,
                context: int | None = None, stride: int | None = None, progress: bool = True) -> HFEvaluation:
    """Score a local `transformers` model on a data directory's evaluation set (`eval_set`, default dev) or on
    the whole documents of a corpus, and write the loss file `out` with the model's provenance. Not given (None):
    `seed` 0, `dtype` float32, `batch_size` DEFAULT_BATCH_SIZE (halved while the device runs out of memory), `arm`
    the model directory's name, `context` the model's maximum length (at most `MAX_DEFAULT_CONTEXT`), `stride`
    half the context."""
    seed = 0 if seed is None else seed
    dtype = dtype or "float32"
    batching = Batching.of(batch_size)
    check_seed(seed, "seed")
    check_dtype(dtype)
    if arm is not None and not arm.strip():
        raise ParameterError("arm", "must name the arm (a non-empty name); without --arm it is the model "
                                    "directory's name")
    check_window(context, stride)
    source = open_source(data, eval_set)
    torch_device = select_device(device)
    with out_of_memory_as(lambda cause: RunFailure(
            f"{model_dir}: out of memory on {torch_device} ({cause}); free the device's memory or "
            f"{_remedies(batching, '--batch-size', '--context')}"
            + (", or load it with --dtype bfloat16" if dtype == "float32" else ""))):
        hf = open_hf_model(model_dir, dtype=dtype, device=torch_device)
        lm = CausalLM(str(hf.path), hf_forward(hf.model),
                      from_transformers(hf.tokenizer, hf.tokenizer_sha256, hf.provenance["tokenizer_files"]),
                      hf.device, vocabulary_size(hf.model))
        context = choose_context(lm.name, max_positions(hf.model.config), context)
        docs, meta = score_source(lm, source, context=context, stride=stride, batching=batching, progress=progress)
    arm = model_name(hf.path) if arm is None else arm
    write_loss_file(out, docs, {"arm": arm, "seed": seed, **hf.provenance, **meta, "gatedv_version": __version__})
    return HFEvaluation(out=str(out), arm=arm, seed=seed, model=str(hf.path), eval_set=meta["eval_set"],
                        scored_as=meta["scored_as"], n_docs=len(docs), skipped_docs=meta.get("skipped_documents", 0),
                        n_targets=int(docs["n_targets"].sum()), n_bytes=int(docs["n_bytes"].sum()),
                        loss_sum=float(docs["loss_sum"].sum()), tokenizer_sha256=hf.tokenizer_sha256)


def check_window(context: int | None, stride: int | None) -> None:
    """A `context` and `stride` given are at least 1, the stride at most the context."""
    for name, value in (("context", context), ("stride", stride)):
        if value is not None:
            check_at_least(name, value, 1)
    if context is not None and stride is not None:
        _check_stride(stride, context)


def choose_context(name: str, maximum: tuple[int, str] | None, context: int | None,
                   default: int | None = None) -> int:
    """The context of each forward pass: the one given, within the model's maximum (positions past it were never
    trained, or have no embedding); else the maximum, at most MAX_DEFAULT_CONTEXT; else `default`."""
    if context is None:
        if maximum is not None:
            return min(maximum[0], MAX_DEFAULT_CONTEXT)
        if default is None:
            raise ParameterError("context", f"{name}: the model's config names no maximum length; give one")
        return default
    if maximum is not None and context > maximum[0]:
        raise ParameterError("context", f"{context} exceeds the model's maximum of {maximum[0]} positions "
                                        f"({maximum[1]})")
    return context


def _check_stride(stride: int, context: int) -> None:
    if stride > context:
        raise ParameterError("stride", f"must be at most the context, {context} (got {stride})")


def _remedies(batching: Batching, batch_size: str, context: str) -> str:
    """What to lower after running out of memory: the batch size while it is above one window, and the context."""
    return f"lower {batch_size} ({batching.size}) or {context}" if batching.size > 1 else f"lower {context}"


def open_source(data: str | os.PathLike, eval_set: str | None) -> Source:
    """A prepared data directory and its evaluation set, or a corpus (any `gatedv prepare` input)."""
    path = Path(data)
    if path.is_dir() and (path / MANIFEST).is_file():
        prepared = PreparedData.open(path)
        return prepared, prepared.eval_set("dev" if eval_set is None else eval_set)
    if eval_set is not None:
        raise ParameterError("eval_set", f"only with a prepared data directory; {data} is read as a corpus of whole "
                                         "documents")
    return open_corpus(str(data))


def score_source(lm: CausalLM, source: Source, *, context: int, stride: int | None, batching: Batching,
                 progress: bool, stored_ids: bool | None = None) -> tuple[pd.DataFrame, dict]:
    """Per-document loss sums of `lm` on an evaluation set or a corpus, and the loss file's metadata of how they
    were scored (`stride` None: half the context). `stored_ids` (evaluation sets): None scores the stored token
    ids when the model's tokenizer is the data directory's (by SHA-256) and the window text otherwise; True the
    stored ids, refused unless the model's tokenizer encodes every window's text to them; False the window
    text."""
    stride = max(1, context // 2) if stride is None else stride
    _check_stride(stride, context)
    if isinstance(source, Corpus):
        docs, meta = _score_corpus(lm, source, context=context, stride=stride, batching=batching, progress=progress)
    else:
        docs, meta = _score_eval_set(lm, *source, stored_ids=stored_ids, context=context, stride=stride,
                                     batching=batching, progress=progress)
    return docs, {**meta, "context": context, "stride": stride, "bos_token_id": lm.tokenizer.bos_token_id,
                  "target_unit": "token", "loss_unit": "nats"}


def _bar(progress: bool, total: int | None = None) -> tqdm:
    # disable=None: a bar only on a terminal, so logs and error output stay clean.
    return tqdm(total=total, desc="evaluate", unit=" tok", file=sys.stderr, disable=None if progress else True,
                leave=False, dynamic_ncols=True)


def _scores_stored_ids(lm: CausalLM, prepared: PreparedData, windows: EvalSet, stored_ids: bool | None) -> bool:
    """Whether the stored token ids are scored (see `score_source`)."""
    same = lm.tokenizer.sha256 == prepared.tokenizer_sha256
    if stored_ids is None:
        return same
    if stored_ids and not same:
        _check_encodes_stored_ids(lm, windows)
    return stored_ids


def _check_encodes_stored_ids(lm: CausalLM, windows: EvalSet) -> None:
    """Refuse a tokenizer that encodes a window's text (context and target together) to other ids than the
    stored ones, naming the first such document."""
    contexts, targets = _window_texts(windows, "checking the model's tokenizer against the stored token ids needs")
    encoded = lm.tokenizer.encode([context + target for context, target in zip(contexts, targets)])
    for doc_id, ids, row in zip(windows.doc_ids, encoded, windows.tokens.tolist()):
        if ids != row:
            at = next((i for i, (ours, theirs) in enumerate(zip(ids, row)) if ours != theirs), min(len(ids), len(row)))
            raise InputError(f"{lm.name}: its tokenizer encodes the text of document {doc_id} of {windows.name} to "
                             f"other token ids than the stored ones (from token {at}: {ids[at:at + 3]} vs "
                             f"{row[at:at + 3]}); score the window text (stored_ids=False), or give the data "
                             "directory's tokenizer")


def _score_eval_set(lm: CausalLM, prepared: PreparedData, windows: EvalSet, *, stored_ids: bool | None,
                    context: int, stride: int, batching: Batching, progress: bool) -> tuple[pd.DataFrame, dict]:
    stored_ids = _scores_stored_ids(lm, prepared, windows, stored_ids)
    sequences = eval_set_sequences(lm, windows, stored_ids)
    largest = max(max(sequence.ids) for sequence in sequences)
    if largest >= lm.vocabulary:
        raise InputError(f"{lm.name}: token id {largest} is outside the model's vocabulary of {lm.vocabulary}")
    n_targets = np.asarray([len(sequence.ids) - sequence.first for sequence in sequences], dtype=np.int64)
    with _bar(progress, total=int(n_targets.sum())) as bar:
        loss_sums = score_sequences(lm.forward, sequences, context=context, stride=stride, batching=batching,
                                    device=lm.device, bar=bar)
    _check_finite(lm, loss_sums, windows.doc_ids)
    docs = pd.DataFrame({"doc_id": windows.doc_ids, "n_targets": n_targets, "loss_sum": loss_sums,
                         "domain": windows.domains, "n_bytes": windows.n_bytes})
    # The targets are the stored ids, made by the data directory's tokenizer, or the model tokenizer's.
    tokenizer_sha256 = prepared.tokenizer_sha256 if stored_ids else lm.tokenizer.sha256
    meta = {"eval_set": windows.name, "eval_set_sha256": windows.sha256,
            "data_manifest_sha256": prepared.manifest_sha256, "tokenizer_sha256": tokenizer_sha256,
            "scored_as": STORED_IDS if stored_ids else "window text, encoded by the model's tokenizer",
            "scoring": "context"}  # each window's target text given its context text
    return docs, meta


def _check_finite(lm: CausalLM, loss_sums: np.ndarray, doc_ids: list[str]) -> None:
    """Refuse scores from logits that are NaN or infinite, naming the first document they hit."""
    bad = np.flatnonzero(~np.isfinite(loss_sums))
    if bad.size:
        raise InputError(f"{lm.name}: its logits are not finite (NaN or infinite) at a scored position of document "
                         f"{doc_ids[bad[0]]}" + (f" and {bad.size - 1} more" if bad.size > 1 else ""))


def _score_corpus(lm: CausalLM, corpus: Corpus, *, context: int, stride: int, batching: Batching,
                  progress: bool) -> tuple[pd.DataFrame, dict]:
    rows, skipped, counts = [], 0, ReadCounts()
    with _bar(progress) as bar:
        for documents in corpus.batches(_CORPUS_BATCH, counts):
            sequences, n_bytes = document_sequences(lm, [document.text for document in documents])
            kept = [(i, sequence) for i, sequence in enumerate(sequences) if sequence is not None]
            skipped += len(documents) - len(kept)
            loss_sums = score_sequences(lm.forward, [sequence for _, sequence in kept], context=context,
                                        stride=stride, batching=batching, device=lm.device, bar=bar)
            _check_finite(lm, loss_sums, [documents[i].doc_id for i, _ in kept])
            rows += [(documents[i].doc_id, len(sequence.ids) - sequence.first, loss, documents[i].domain, n_bytes[i])
                     for (i, sequence), loss in zip(kept, loss_sums)]
    if not rows:
        raise InputError(f"{corpus.spec}: no document holds a token to score")
    docs = pd.DataFrame(rows, columns=["doc_id", "n_targets", "loss_sum", "domain", "n_bytes"])
    repeated = docs["doc_id"][docs["doc_id"].duplicated()]
    if len(repeated):
        raise InputError(f"{corpus.spec}: document id {repeated.iloc[0]!r} appears more than once; a loss file needs "
                         "unique ids")
    meta = {"eval_set": Path(corpus.spec).name or corpus.spec, "corpus": corpus.spec,
            "corpus_listing_sha256": corpus.listing_sha256, "tokenizer_sha256": lm.tokenizer.sha256,
            "scored_as": "whole documents", "scoring": "document", "skipped_documents": skipped,
            "empty_documents": counts.empty, "undecodable_documents": counts.undecodable}
    return docs, meta


__all__ = ["DEFAULT_BATCH_SIZE", "STORED_IDS", "Batching", "CausalLM", "HFEvaluation", "TokenSequence",
           "check_window", "choose_context", "document_sequences", "eval_set_sequences", "evaluate_hf",
           "open_source", "score_source", "score_sequences", "token_windows"]
