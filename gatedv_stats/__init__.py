"""gatedv-stats: paired comparisons of Transformer variants from per-document loss files."""

__version__ = "0.1.0"
