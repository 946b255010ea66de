"""A compact, CUDA-aware PyTorch trainer for the GatedV model family that emits per-document loss sums."""
