"""Data for training and evaluation: corpus readers (`corpus`), the byte-level BPE tokenizer (`tokenizer`),
`gatedv prepare` with its staging and reuse (`prepare`), its passes over the corpus and the domain-disjoint
evaluation split (`split`), the training token store while it is written (`token_store`), and the prepared data
directory read by every run: evaluation sets and the training-window sampler (`prepared`)."""
