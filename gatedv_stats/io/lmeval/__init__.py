"""What EleutherAI lm-evaluation-harness writes, read: one module per kind of file.

- `samples`: the lines of a per-sample log (`samples_<task>_<date>.jsonl`), the output type a sample comes from,
  its metrics' names and its document's id;
- `perplexity`: logs of rolling-loglikelihood (perplexity) tasks → the documents of a loss file;
- `items`: logs of multiple-choice, loglikelihood and generate_until tasks → the items of an item-score file;
- `results`: the results file of a run (`results_<date>.json`, `HarnessResults`) and its hashes.

`gatedv import lm-eval` (the command's orchestration over these readers and the writers of loss and item-score
files) is `gatedv_stats.imports.lmeval`.
"""
