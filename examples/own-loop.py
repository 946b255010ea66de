"""From your own training loop to a verdict: a nanoGPT-style model defined here, trained by a plain PyTorch loop
on the embedded corpus at two learning rates (the arms), two seeds each, scored in memory by `score_model` and
compared by `gv.compare`. `gatedv bootstrap OUT/runs --baseline-arm lr-1e-3 --variant-arm lr-4e-3` reads its files.

    python examples/own-loop.py --out own-loop [--updates 30]
"""

import argparse
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import gatedv_stats as gv
from trainer.data.prepare import prepare
from trainer.data.prepared import PreparedData
from trainer.hf.score import score_model

ARMS = {"lr-1e-3": 1e-3, "lr-4e-3": 4e-3}


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads, self.ln1, self.ln2 = heads, nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, self.heads, D // self.heads).transpose(1, 3).unbind(2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, D)
        x = x + self.proj(y)
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, context: int, d: int = 64, layers: int = 2, heads: int = 4) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(context, d)
        self.blocks = nn.Sequential(*(Block(d, heads) for _ in range(layers)))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:  # token ids (B, T) -> logits (B, T, V)
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        return self.head(self.ln(self.blocks(x)))


def train(data: PreparedData, lr: float, seed: int, updates: int, batch: int = 8) -> GPT:
    torch.manual_seed(seed)
    model = GPT(data.vocab_size, data.context)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    sampler = data.sampler(seed)  # the same windows for every arm of a seed
    for update in range(updates):
        windows = sampler.batch(update, batch)  # (batch, context + 1) token ids
        loss = F.cross_entropy(model(windows[:, :-1]).flatten(0, 1), windows[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("own-loop"))
    parser.add_argument("--updates", type=int, default=200)
    args = parser.parse_args()
    prepare("builtin:python-stdlib", args.out / "data", eval_docs=12, max_docs=200, vocab_size=1024, context=64,
            progress=False)  # a small tokenizer and 65-token windows: seconds per run on a CPU
    data = PreparedData.open(args.out / "data")
    runs = [score_model(train(data, lr, seed, args.updates), None, data.path,  # None: the data's own tokenizer
                        args.out / "runs" / f"{arm}-seed{seed}.parquet", arm=arm, seed=seed, step=args.updates,
                        eval_set="heldout", progress=False) for arm, lr in ARMS.items() for seed in (1, 2)]
    print(gv.compare(runs, baseline_arm="lr-1e-3", variant_arm="lr-4e-3"))


if __name__ == "__main__":
    main()
