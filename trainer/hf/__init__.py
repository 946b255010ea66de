"""Interop with `transformers`: baseline-family checkpoints exported as `LlamaForCausalLM` (`export`), a local
causal language model opened offline with what identifies it (`model`), and its per-document loss sums written as
loss files (`evaluate`); a causal language model in memory scored by the same path (`score`, over `tokenizer`), and
a `transformers.Trainer` callback writing its loss files during training (`callback`)."""
