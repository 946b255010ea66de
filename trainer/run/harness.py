"""Our checkpoints as an lm-evaluation-harness model: every variant of the family scored on downstream tasks.

`CheckpointLM` follows the harness's own `hf` model (`lm_eval.models.huggingface.HFLM`) request by request: the
same tokenisation of (context, continuation) pairs (the harness's `TemplateLM`), an empty context conditioned on
the prefix token, rolling windows of the model's context for `loglikelihood_rolling`, greedy `generate_until` cut
at the stop strings and the end-of-text token. So a baseline checkpoint scored here and its `gatedv export-hf`
directory scored by the harness's `hf` model give the same per-item log-likelihoods (tests/trainer/test_harness.py).

Where the harness would cut a prompt from the left to fit the model's context, this model refuses the task with
one line instead: the scores would belong to another task.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import torch
from lm_eval.api.instance import Instance
from lm_eval.api.model import TemplateLM
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window
from tokenizers import AddedToken, Tokenizer
from tqdm import tqdm

from gatedv_stats.core.errors import InputError
from trainer.hf.export import END_OF_TEXT, SPLIT_SPECIAL_TOKENS, end_of_text_id
from trainer.model.transformer import Transformer

DEFAULT_BATCH_SIZE = 16
DEFAULT_MAX_GEN_TOKS = 256  # the harness's default when a task names none


def harness_tokenizer(path: str | Path) -> Tokenizer:
    """A data directory's `tokenizer.json` with the end-of-text token marked special but not matched in a text, as
    `gatedv export-hf` writes it for `transformers` (so both encode and decode every text alike)."""
    tokenizer = Tokenizer.from_file(str(path))
    end_of_text_id(tokenizer, str(path))
    tokenizer.add_special_tokens([AddedToken(END_OF_TEXT, special=True, normalized=False)])
    tokenizer.encode_special_tokens = SPLIT_SPECIAL_TOKENS
    return tokenizer


class CheckpointLM(TemplateLM):
    """A `Transformer` and its tokenizer behind the harness's request types, batched, without gradients."""

    def __init__(self, model: Transformer, tokenizer: Tokenizer, *, device: torch.device,
                 batch_size: int = DEFAULT_BATCH_SIZE, name: str = "gatedv", progress: bool = True) -> None:
        super().__init__()
        self.model = model.eval()
        self.tok = tokenizer
        self._device = device
        self.batch_size = batch_size
        self.max_length = model.config.seq_len
        self.name = name
        self.progress = progress
        self._end = end_of_text_id(tokenizer, name)

    @property
    def eot_token_id(self) -> int:
        return self._end

    @property
    def prefix_token_id(self) -> int:
        return self._end

    @property
    def tokenizer_name(self) -> str:
        return self.name

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs) -> list[int]:
        # The exported tokenizer adds no BOS either: a rolling score starts from the one prefix token.
        return self.tok.encode(string, add_special_tokens=False).ids

    def _bar(self, total: int, desc: str) -> tqdm:
        # disable=None: a bar only on a terminal, so logs and error output stay clean.
        return tqdm(total=total, desc=desc, file=sys.stderr, disable=None if self.progress else True, leave=False,
                    dynamic_ncols=True)

    def _check_fits(self, request: Instance, needed: int, what: str, generated: bool = False) -> None:
        if needed > self.max_length:
            fewer = "fewer new tokens (--max-gen-toks), fewer shots" if generated else "fewer shots"
            raise InputError(f"task {request.task_name}: item {request.doc_id} needs {needed} tokens ({what}), the "
                             f"model's context is {self.max_length}; give {fewer} (--num-fewshot) or a task with "
                             "shorter prompts")

    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, **kwargs) -> list[tuple[float, bool]]:
        """(sum of log-probabilities of the continuation tokens, whether each is the argmax) per request."""
        pairs = [(context, continuation) for _, context, continuation in requests]
        return self._score(pairs, "loglikelihood")

    def loglikelihood(self, requests: list[Instance], disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        for request in requests:
            context, continuation = request.args
            tokens = len(self.tok_encode(context + continuation)) + (0 if context else 1)
            self._check_fits(request, tokens - 1, "prompt and answer")
        return super().loglikelihood(requests, disable_tqdm=disable_tqdm)

    @torch.inference_mode()
    def _score(self, pairs: list[tuple[list[int], list[int]]], desc: str) -> list[tuple[float, bool]]:
        """Score (context ids, continuation ids) pairs, longest first, `batch_size` at a time, right-padded (in a
        causal model a padded position never changes the logits before it)."""
        order = sorted(range(len(pairs)), key=lambda i: -(len(pairs[i][0]) + len(pairs[i][1])))
        out: list[tuple[float, bool]] = [(0.0, False)] * len(pairs)
        with self._bar(len(pairs), desc) as bar:
            for begin in range(0, len(order), self.batch_size):
                batch = order[begin:begin + self.batch_size]
                inputs = [(pairs[i][0] + pairs[i][1])[:-1] for i in batch]
                logits = self._logits(inputs)
                for row, i in enumerate(batch):
                    continuation = pairs[i][1]
                    end = len(inputs[row])
                    picked = logits[row, end - len(continuation):end].log_softmax(dim=-1)  # the scored positions only
                    target = torch.as_tensor(continuation, device=picked.device)
                    out[i] = (float(picked.gather(1, target[:, None]).sum()),
                              bool((picked.argmax(dim=-1) == target).all()))
                bar.update(len(batch))
        return out

    def _logits(self, inputs: list[list[int]]) -> torch.Tensor:
        """FP32 logits (B, T, V) of right-padded token lists."""
        width = max(map(len, inputs))
        batch = torch.zeros((len(inputs), width), dtype=torch.long)
        for row, ids in enumerate(inputs):
            batch[row, :len(ids)] = torch.as_tensor(ids)
        return self.model(batch.to(self._device)).float()

    def loglikelihood_rolling(self, requests: list[Instance], disable_tqdm: bool = False) -> list[float]:
        """Log-likelihood of each whole text: disjoint windows of the model's context, the first conditioned on
        the prefix token, each later one on the tokens before it."""
        pairs: list[tuple[list[int], list[int]]] = []
        owners: list[int] = []
        for k, request in enumerate(requests):
            (text,) = request.args
            windows = get_rolling_token_windows(token_list=self.tok_encode(text), prefix_token=self.prefix_token_id,
                                                max_seq_len=self.max_length, context_len=1)
            for context, continuation in map(make_disjoint_window, windows):
                pairs.append((list(context), list(continuation)))
                owners.append(k)
        totals = [0.0] * len(requests)
        for k, (log_likelihood, _) in zip(owners, self._score(pairs, "loglikelihood_rolling")):
            totals[k] += log_likelihood
        return totals

    def generate_until(self, requests: list[Instance], disable_tqdm: bool = False) -> list[str]:
        """Greedy continuations, cut at the first stop string (the task's `until` and the end-of-text token)."""
        end_text = self.tok.decode([self._end], skip_special_tokens=False)
        results: list[str] = [""] * len(requests)
        groups: dict[tuple[tuple[str, ...], int], list[int]] = {}
        for i, request in enumerate(requests):
            context, settings = request.args
            until, limit = _generation_settings(request, settings, end_text)
            self._check_fits(request, len(self.tok_encode(context)) + limit, f"prompt and {limit} generated",
                             generated=True)
            groups.setdefault((until, limit), []).append(i)
        with self._bar(len(requests), "generate_until") as bar:
            for (until, limit), members in groups.items():
                members.sort(key=lambda i: -len(self.tok_encode(requests[i].args[0])))
                for begin in range(0, len(members), self.batch_size):
                    chunk = members[begin:begin + self.batch_size]
                    prompts = [self.tok_encode(requests[i].args[0]) for i in chunk]
                    for i, text in zip(chunk, self._greedy(prompts, until, limit)):
                        results[i] = text
                    bar.update(len(chunk))
        return results

    @torch.inference_mode()
    def _greedy(self, prompts: list[list[int]], until: tuple[str, ...], limit: int) -> Iterator[str]:
        """Up to `limit` argmax tokens after each prompt, until the end-of-text token or a stop string."""
        sequences = [list(prompt) for prompt in prompts]
        live = list(range(len(prompts)))
        for _ in range(limit):
            if not live:
                break
            logits = self._logits([sequences[r] for r in live])
            still = []
            for row, r in enumerate(live):
                token = int(logits[row, len(sequences[r]) - 1].argmax())
                sequences[r].append(token)
                text = self.tok.decode(sequences[r][len(prompts[r]):], skip_special_tokens=True)
                if token != self._end and not any(stop and stop in text for stop in until):
                    still.append(r)
            live = still
        for r, prompt in enumerate(prompts):
            text = self.tok.decode(sequences[r][len(prompt):], skip_special_tokens=True)
            for stop in until:
                if stop:
                    text = text.split(stop)[0]
            yield text


def _generation_settings(request: Instance, settings: dict, end_text: str) -> tuple[tuple[str, ...], int]:
    """The stop strings (the end-of-text token's text added) and the most tokens to generate; greedy only."""
    settings = dict(settings)
    if settings.get("do_sample") or settings.get("temperature"):
        raise InputError(f"task {request.task_name}: sampled generation (do_sample / temperature) is not "
                         "supported; this model generates greedily")
    until = settings.get("until") or []
    until = [until] if isinstance(until, str) else list(until)
    if end_text not in until:
        until.append(end_text)
    limit = int(settings.get("max_gen_toks", settings.get("max_new_tokens", DEFAULT_MAX_GEN_TOKS)))
    return tuple(until), limit
