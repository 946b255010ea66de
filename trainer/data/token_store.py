"""The training token store while it is written: each tokenized document goes straight into `train.bin`, or, when
its domain group may give an evaluation document, into a side store until the evaluation documents are chosen."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import numpy as np

from gatedv_stats.core.atomic import HashingWriter


@dataclass
class SplitStore:
    """Two append-only uint16 token files and the offsets of the documents in each (corpus positions)."""

    train_file: BinaryIO | HashingWriter  # hashed as it is written (gatedv_stats.core.atomic.atomic_file)
    side_file: BinaryIO
    side_path: Path
    train_docs: list[int] = field(default_factory=list)
    train_offsets: list[int] = field(default_factory=lambda: [0])
    side_docs: list[int] = field(default_factory=list)
    side_offsets: list[int] = field(default_factory=lambda: [0])
    side_names: dict[int, tuple[str, str]] = field(default_factory=dict)  # corpus position -> (doc_id, domain)

    def add_training(self, index: int, tokens: np.ndarray) -> None:
        self.train_file.write(tokens.tobytes())
        self.train_docs.append(index)
        self.train_offsets.append(self.train_offsets[-1] + len(tokens))

    def add_candidate(self, index: int, tokens: np.ndarray, doc_id: str, domain: str) -> None:
        self.side_file.write(tokens.tobytes())
        self.side_docs.append(index)
        self.side_names[index] = (doc_id, domain)
        self.side_offsets.append(self.side_offsets[-1] + len(tokens))

    def candidate_tokens(self) -> np.ndarray:
        """The side store's tokens (memory-mapped)."""
        self.side_file.flush()
        if not self.side_offsets[-1]:
            return np.zeros(0, np.uint16)
        return np.memmap(self.side_path, dtype=np.uint16, mode="r")

    def candidate_window(self, side: np.ndarray, index: int, length: int) -> np.ndarray:
        """The first `length` tokens of candidate document `index`."""
        start = self.side_offsets[self.side_docs.index(index)]
        return side[start:start + length]

    def keep_candidates(self, side: np.ndarray, excluded: np.ndarray) -> None:
        """Append every candidate document that is not `excluded` to the training store, in corpus order."""
        for position, index in enumerate(self.side_docs):
            if not excluded[index]:
                self.add_training(index, side[self.side_offsets[position]:self.side_offsets[position + 1]])

    def train_lengths(self) -> np.ndarray:
        return np.diff(np.asarray(self.train_offsets, dtype=np.int64))
