"""What EleutherAI lm-evaluation-harness writes, read, one module per kind of file: `samples` (the lines of a
per-sample log), `perplexity` (rolling-loglikelihood logs → the documents of a loss file), `items` (logs of other
task types → the items of an item-score file), `results` (a run's results file and its hashes). The import that
writes loss and item-score files from them is `gatedv_stats.imports.lmeval`.
"""
