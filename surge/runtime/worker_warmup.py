"""The kernel a compile worker compiles first, before any job arrives: whatever Triton
imports and sets up on its first compile (some versions import torch while binding
arguments: seconds) then overlaps the capture and lowering of the graph whose kernels
the worker will compile. Loaded only in workers (Triton needs kernels in files)."""
import triton
import triton.language as tl


@triton.jit
def add_one(x_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask) + 1, mask)
