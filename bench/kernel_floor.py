"""How much of a CPU call is spent in matrix products and attention kernels, measured with torch.profiler.

That time is a floor for any implementation that runs the same products through the same kernels (MKL,
PyTorch's SDPA): with every other op (norms, activations, softmax, RoPE, optimizer, autograd bookkeeping) made
free, a call still costs this much. Dividing a peer's measured time by it bounds the speed-up over that peer.
"""

from __future__ import annotations

from collections.abc import Callable

from torch.profiler import ProfilerActivity, profile

MATRIX_PRODUCTS = ("aten::mm", "aten::addmm", "aten::addmm_", "aten::bmm", "aten::baddbmm")


def is_kernel(op: str) -> bool:
    """A dense matrix product or a fused attention kernel (forward or backward)."""
    return op in MATRIX_PRODUCTS or op.startswith("aten::_scaled_dot_product_")


def kernel_seconds(call: Callable[[], object], repeats: int = 3) -> tuple[float, dict[str, float]]:
    """Seconds per call spent in matrix products and attention kernels (CPU wall time of those ops, which
    run multi-threaded inside), and the same split by op name."""
    call()  # outside the profile: first-call allocations
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(repeats):
            call()
    by_op = {e.key: e.self_cpu_time_total / 1e6 / repeats for e in prof.key_averages() if is_kernel(e.key)}
    return sum(by_op.values()), by_op


def kernel_floor_line(name: str, kernel_s: float, own_s: float, peer: str, peer_s: float) -> str:
    """One printed line: the kernel share of `name`'s call and the speed-up over `peer` it allows at most."""
    return (f"{name}: {kernel_s * 1e3:.0f} ms of its {own_s * 1e3:.0f} ms per call in matrix products and attention "
            f"kernels ({kernel_s / own_s:.0%}); with everything else free it could reach at most "
            f"{peer_s / kernel_s:.2f}× {peer} ({peer_s * 1e3:.0f} ms)")
