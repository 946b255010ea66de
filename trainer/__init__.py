"""A compact, CUDA-aware PyTorch trainer for the GatedV model family that emits per-document loss sums.

Where things live:

* `trainer.model`: the model family in one file (`transformer`), its knobs and custom variants (`knobs`),
  Table 1's parameter counts (`params`) and the moment-matching coefficients (`moments`).
* `trainer.data`: corpus readers (`corpus`), the tokenizer (`tokenizer`), `gatedv prepare` (`prepare`, its passes
  over the corpus in `split`, the token store it writes in `token_store`) and the prepared data directory it
  leaves: evaluation sets and the training-window sampler (`prepared`).
* `trainer.run`: one training run: its recipe and spec (`recipe`), the loop (`train`), checkpoints, signals held
  to the end of an update (`interruption`), device and precision (`device`), evaluation of a checkpoint into loss
  files (`evaluate`) and the cost benchmark (`bench`).
* `trainer.grid`: grids of runs: experiment files (`experiment`), one run of a grid (`grid_run`), the local sweep
  (`sweep`, its worker pool and torchrun in `launch`), submitit jobs (`cluster`) and learning-rate selection
  (`lr_selection`).
* `trainer.hf`: `transformers` interop: export to Llama (`export`), opening a local model (`model`) and evaluating
  it into loss files (`evaluate`); a model in memory scored by the same path (`score`, its tokenizer in
  `tokenizer`) and the `transformers.Trainer` callback over it (`callback`).

The end-to-end demo (`demo.py`) and the command line (`cli.py`) sit above the package.
"""
