"""Per-document loss sums of any local `transformers` causal language model, written as a loss file
(docs/method.md §5, "Models with their own tokenizer").

Two inputs:

* a data directory's evaluation set, where every model scores the same text: the target text of each window
  (the UTF-8 bytes of its 256 targets) given its context text (the first token's text). A model whose
  `tokenizer.json` is the data directory's scores the stored token ids, exactly as `gatedv evaluate` does; any
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
from collections.abc import Iterator
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
from trainer.hf.model import HFModel, check_dtype, model_name, open_hf_model, vocabulary_size
from trainer.run.device import out_of_memory_as, select_device

DEFAULT_BATCH_SIZE = 8
_CORPUS_BATCH = 64  # documents encoded and scored together


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
def score_sequences(model: torch.nn.Module, sequences: list[TokenSequence], *, context: int, stride: int,
                    batch_size: int, device: torch.device, bar: tqdm | None = None) -> np.ndarray:
    """Summed negative log-likelihood (nats, float64) of each sequence's scored tokens.

    Windows of similar length go through the model `batch_size` at a time, right-padded: in a causal model a
    padded position never changes the logits before it.
    """
    windows = [(k, *window) for k, sequence in enumerate(sequences)
               for window in token_windows(len(sequence.ids), sequence.first, context, stride)]
    windows.sort(key=lambda window: window[3] - 1 - window[1], reverse=True)
    sums = np.zeros(len(sequences), dtype=np.float64)
    for begin in range(0, len(windows), batch_size):
        batch = windows[begin:begin + batch_size]
        owners, nll = _score_batch(model, sequences, batch, device)
        np.add.at(sums, owners, nll)
        if bar is not None:
            bar.update(len(owners))
    return sums


def _score_batch(model: torch.nn.Module, sequences: list[TokenSequence], batch: list[tuple[int, int, int, int]],
                 device: torch.device) -> tuple[np.ndarray, np.ndarray]:
    """(owning sequence, NLL) of every target token of a batch of windows (k, start, a, b)."""
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
    logits = model(input_ids=inputs.to(device), use_cache=False).logits
    picked = logits[torch.as_tensor(rows, device=device), torch.as_tensor(positions, device=device)].float()
    log_probs = picked.log_softmax(dim=-1).gather(1, torch.as_tensor(targets, device=device)[:, None])[:, 0]
    return np.asarray(owners), (-log_probs).double().cpu().numpy()


def _encode(tokenizer, texts: list[str]) -> list[list[int]]:
    """Token ids of each text, without special tokens."""
    if not texts:
        return []
    return [list(ids) for ids in tokenizer(list(texts), add_special_tokens=False, verbose=False)["input_ids"]]


def _prefix(tokenizer) -> list[int]:
    """[BOS] when the tokenizer defines a beginning-of-sequence token, else nothing."""
    bos = getattr(tokenizer, "bos_token_id", None)
    return [int(bos)] if bos is not None else []


def eval_set_sequences(hf: HFModel, windows: EvalSet, stored_ids: bool) -> list[TokenSequence]:
    """One sequence per evaluation window: the stored ids, or [BOS] + context tokens + target tokens."""
    if stored_ids:
        return [TokenSequence(row.tolist(), 1) for row in windows.tokens]
    if windows.context_texts is None or windows.target_texts is None:
        raise InputError(f"{windows.name}: the evaluation set holds no window text (context_text, target_text), "
                         "which a model with its own tokenizer needs")
    prefix = _prefix(hf.tokenizer)
    sequences = []
    for doc_id, context, target in zip(windows.doc_ids, _encode(hf.tokenizer, windows.context_texts),
                                       _encode(hf.tokenizer, windows.target_texts)):
        if not target or not prefix + context:
            raise InputError(f"{hf.path}: its tokenizer encodes the {'target' if not target else 'context'} text "
                             f"of document {doc_id} as no token, so there is nothing to score it with")
        sequences.append(TokenSequence(prefix + context + target, len(prefix) + len(context)))
    return sequences


def document_sequences(hf: HFModel, texts: list[str]) -> tuple[list[TokenSequence | None], list[int]]:
    """Whole documents: (a sequence per document, None when nothing is left to score; target bytes each)."""
    prefix = _prefix(hf.tokenizer)
    contexts = [""] * len(texts) if prefix else [text[:1] for text in texts]
    targets = texts if prefix else [text[1:] for text in texts]
    sequences = [TokenSequence(prefix + context + target, len(prefix) + len(context)) if target else None
                 for context, target in zip(_encode(hf.tokenizer, contexts), _encode(hf.tokenizer, targets))]
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
    `seed` 0, `dtype` float32, `batch_size` DEFAULT_BATCH_SIZE, `arm` the model directory's name, `context` the
    model's maximum length (at most `MAX_DEFAULT_CONTEXT`), `stride` half the context."""
    seed = 0 if seed is None else seed
    dtype = dtype or "float32"
    batch_size = DEFAULT_BATCH_SIZE if batch_size is None else batch_size
    check_at_least("batch_size", batch_size, 1)
    check_seed(seed, "seed")
    check_dtype(dtype)
    if arm is not None and not arm.strip():
        raise ParameterError("arm", "must name the arm (a non-empty name); without --arm it is the model "
                                    "directory's name")
    for name, value in (("context", context), ("stride", stride)):
        if value is not None:
            check_at_least(name, value, 1)
    if context is not None and stride is not None:
        _check_stride(stride, context)
    source = _open_source(data, eval_set)
    torch_device = select_device(device)
    remedies = f"lower --batch-size ({batch_size}) or --context" + (", or load it with --dtype bfloat16"
                                                                   if dtype == "float32" else "")
    with out_of_memory_as(lambda cause: RunFailure(f"{model_dir}: out of memory on {torch_device} ({cause}); "
                                                   f"free the device's memory or {remedies}")):
        hf = open_hf_model(model_dir, dtype=dtype, device=torch_device)
        context = hf.default_context() if context is None else _check_context(hf, context)
        stride = max(1, context // 2) if stride is None else stride
        _check_stride(stride, context)
        if isinstance(source, Corpus):
            docs, meta = _score_corpus(hf, source, context=context, stride=stride, batch_size=batch_size,
                                       progress=progress)
        else:
            docs, meta = _score_eval_set(hf, *source, context=context, stride=stride, batch_size=batch_size,
                                         progress=progress)
    arm = model_name(hf.path) if arm is None else arm
    bos = _prefix(hf.tokenizer)
    write_loss_file(out, docs, {"arm": arm, "seed": seed, **meta, **hf.provenance, "context": context,
                                "stride": stride, "bos_token_id": bos[0] if bos else None,
                                "target_unit": "token", "loss_unit": "nats", "gatedv_version": __version__})
    return HFEvaluation(out=str(out), arm=arm, seed=seed, model=str(hf.path), eval_set=meta["eval_set"],
                        scored_as=meta["scored_as"], n_docs=len(docs), skipped_docs=meta.get("skipped_documents", 0),
                        n_targets=int(docs["n_targets"].sum()), n_bytes=int(docs["n_bytes"].sum()),
                        loss_sum=float(docs["loss_sum"].sum()), tokenizer_sha256=hf.tokenizer_sha256)


def _check_context(hf: HFModel, context: int) -> int:
    """A context within the model's maximum: positions past it were never trained (or have no embedding)."""
    maximum = hf.max_positions()
    if maximum is not None and context > maximum[0]:
        raise ParameterError("context", f"{context} exceeds the model's maximum of {maximum[0]} positions "
                                        f"({maximum[1]})")
    return context


def _check_stride(stride: int, context: int) -> None:
    if stride > context:
        raise ParameterError("stride", f"must be at most the context, {context} (got {stride})")


def _open_source(data: str | os.PathLike, eval_set: str | None) -> tuple[PreparedData, EvalSet] | Corpus:
    """A prepared data directory and its evaluation set, or a corpus (any `gatedv prepare` input)."""
    path = Path(data)
    if path.is_dir() and (path / MANIFEST).is_file():
        prepared = PreparedData.open(path)
        return prepared, prepared.eval_set("dev" if eval_set is None else eval_set)
    if eval_set is not None:
        raise ParameterError("eval_set", f"only with a prepared data directory; {data} is read as a corpus of whole "
                                         "documents")
    return open_corpus(str(data))


def _bar(progress: bool, total: int | None = None) -> tqdm:
    # disable=None: a bar only on a terminal, so logs and error output stay clean.
    return tqdm(total=total, desc="evaluate", unit=" tok", file=sys.stderr, disable=None if progress else True,
                leave=False, dynamic_ncols=True)


def _score_eval_set(hf: HFModel, prepared: PreparedData, windows: EvalSet, *, context: int, stride: int,
                    batch_size: int, progress: bool) -> tuple[pd.DataFrame, dict]:
    stored_ids = hf.tokenizer_sha256 == prepared.tokenizer_sha256
    sequences = eval_set_sequences(hf, windows, stored_ids)
    vocabulary = vocabulary_size(hf.model)
    largest = max(max(sequence.ids) for sequence in sequences)
    if largest >= vocabulary:
        raise InputError(f"{hf.path}: token id {largest} is outside the model's vocabulary of {vocabulary}")
    n_targets = np.asarray([len(sequence.ids) - sequence.first for sequence in sequences], dtype=np.int64)
    with _bar(progress, total=int(n_targets.sum())) as bar:
        loss_sums = score_sequences(hf.model, sequences, context=context, stride=stride, batch_size=batch_size,
                                    device=hf.device, bar=bar)
    docs = pd.DataFrame({"doc_id": windows.doc_ids, "n_targets": n_targets, "loss_sum": loss_sums,
                         "domain": windows.domains, "n_bytes": windows.n_bytes})
    meta = {"eval_set": windows.name, "eval_set_sha256": windows.sha256,
            "data_manifest_sha256": prepared.manifest_sha256,
            "scored_as": "stored token ids" if stored_ids else "window text, encoded by the model's tokenizer",
            "scoring": "context"}  # each window's target text given its context text
    return docs, meta


def _score_corpus(hf: HFModel, corpus: Corpus, *, context: int, stride: int, batch_size: int,
                  progress: bool) -> tuple[pd.DataFrame, dict]:
    rows, skipped, counts = [], 0, ReadCounts()
    with _bar(progress) as bar:
        for documents in corpus.batches(_CORPUS_BATCH, counts):
            sequences, n_bytes = document_sequences(hf, [document.text for document in documents])
            kept = [(i, sequence) for i, sequence in enumerate(sequences) if sequence is not None]
            skipped += len(documents) - len(kept)
            loss_sums = score_sequences(hf.model, [sequence for _, sequence in kept], context=context, stride=stride,
                                        batch_size=batch_size, device=hf.device, bar=bar)
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
            "corpus_listing_sha256": corpus.listing_sha256, "scored_as": "whole documents", "scoring": "document",
            "skipped_documents": skipped, "empty_documents": counts.empty,
            "undecodable_documents": counts.undecodable}
    return docs, meta


__all__ = ["DEFAULT_BATCH_SIZE", "HFEvaluation", "TokenSequence", "document_sequences", "eval_set_sequences",
           "evaluate_hf", "score_sequences", "token_windows"]
