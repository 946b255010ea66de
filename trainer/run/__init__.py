"""One training run: the recipe and the spec that fix its numbers (`recipe`), the training loop (`train`),
checkpoint files (`checkpoint`), signals held to the end of the update in progress (`interruption`), device and
precision (`device`), the processes of a data-parallel run (`ranks`), per-document evaluation of a checkpoint into
loss files (`evaluate`) and the cost benchmark of two checkpoints (`bench`)."""
