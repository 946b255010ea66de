"""Grids of paired runs: experiment files in TOML (`experiment`), one run of a grid brought to `finished`
(`grid_run`), the local sweep (`sweep`) with its worker pool and torchrun launches (`launch`), one submitit job per
run on a cluster (`cluster`), and learning-rate selection over a finished grid (`lr_selection`)."""
