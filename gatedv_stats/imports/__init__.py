"""Other tools' results brought in: the orchestration of `gatedv import TOOL`, over the readers of their files
(`gatedv_stats.io`) and the writers of loss and item-score files.

- `lmeval`: `gatedv import lm-eval` (lm-evaluation-harness sample logs and results directories).
"""
