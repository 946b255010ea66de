"""bench/kernel_floor.py: which ops count as matrix-product / attention kernels, and their profiled time."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch
import torch.nn.functional as F

_LOADER = importlib.util.spec_from_file_location("kernel_floor",
                                                  Path(__file__).parents[2] / "bench" / "kernel_floor.py")
kernel_floor = importlib.util.module_from_spec(_LOADER)
_LOADER.loader.exec_module(kernel_floor)


def test_only_matrix_products_and_attention_are_counted():
    x = torch.randn(64, 64)
    q = torch.randn(1, 2, 16, 8)

    def elementwise() -> None:
        (x.exp() + x.sin()).sum()

    def products() -> None:
        x @ x
        F.scaled_dot_product_attention(q, q, q, is_causal=True)

    seconds, by_op = kernel_floor.kernel_seconds(elementwise, repeats=2)
    assert seconds == 0.0 and by_op == {}
    seconds, by_op = kernel_floor.kernel_seconds(products, repeats=2)
    assert "aten::mm" in by_op and any(op.startswith("aten::_scaled_dot_product_") for op in by_op)
    assert seconds > 0 and seconds == sum(by_op.values())


def test_floor_line_states_share_and_ceiling():
    line = kernel_floor.kernel_floor_line("ours (step)", 0.2, 0.25, "transformers", 0.3)
    assert "200 ms of its 250 ms" in line and "(80%)" in line and "1.50× transformers (300 ms)" in line
