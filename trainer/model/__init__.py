"""The GatedV model family: the pre-norm decoder-only Transformer and its variants in one readable file
(`transformer`), the knobs that make custom variants (`knobs`), Table 1's trainable-parameter counts (`params`) and
the moment-matching coefficients of `affine-match` / `moment-silu` (`moments`)."""
