"""What differs between the code generators: one ``Target`` object, passed down explicitly.

Lowering, scheduling and codegen know nothing of Triton or C++ beyond what a ``Target``
says: whether 16-bit matmuls are padded, whether column reductions are split, whether
column sums join row kernels, whether a kernel may write over what it reads while it
rounds to bf16, whether Triton runs interpreted. The driver (``surge/backends``) builds
the target of a compile, picks its kernel and host writers by ``name``, and puts
``cache_key()`` into every key of compiled code, so code built for one target is never
loaded for another.
"""
from __future__ import annotations

import dataclasses
import hashlib


@dataclasses.dataclass(frozen=True)
class Target:
    # Which writer pair renders the kernels and host code: "triton" or "cpp".
    name: str
    # Where the kernels' tensors live: "cuda", or "cpu" (C++, or Triton's interpreter).
    device_type: str
    # Triton's CPU interpreter runs the kernels (TRITON_INTERPRET=1): nothing is compiled,
    # and bf16 values are rounded by hand (the interpreter truncates).
    interpreted: bool = False
    # The default of ``CompileConfig.pad_matmuls``: cuBLAS is slow on misaligned 16-bit rows.
    pads_matmuls: bool = False
    # Reductions that would run in few GPU programs are split in two kernels: column
    # reductions (``x.sum(0)``, channels-last batch-norm statistics) with few column tiles,
    # and large reductions over few rows. C++ kernels parallelize over rows and column
    # blocks instead, and split only rows longer than the split threshold.
    splits_column_reductions: bool = False
    # Float sums over rows move into the row kernel that computes their operands (C++:
    # ``schedule/column_fusion.py``); a GPU runs rows in many programs and keeps them apart.
    fuses_column_sums: bool = False
    # A kernel that rounds to bf16 may write its output over a buffer it reads. Not in
    # C++: its vector loop reruns a block as scalar code when it met a NaN or denormal,
    # and would read what the first run wrote.
    in_place_bf16: bool = True
    # The memory plan's arena (``schedule/arena.py``): each buffer's offset in it is a
    # multiple of this many bytes (a cache line for C++ vector loops; Triton specializes
    # kernels on 16-byte aligned pointers, and wider ones keep loads coalesced) ...
    buffer_alignment: int = 64
    # ... and buffers of more bytes than this keep allocations of their own (their memory
    # goes back to the allocator at their last use; an arena holds it for the whole call).
    arena_buffer_limit: int = 1 << 20
    # Buffers that the host code hands to extern calls (so it needs a tensor of them) are
    # views of the arena too. Not in C++: its kernels take addresses, and on a CPU a view
    # (``as_strided``, 1.13 us) costs more than the allocation it replaces
    # (``empty_strided``, 1.03 us); those buffers keep allocations of their own there.
    views_in_arena: bool = True
    # What the built code depends on besides the source: the GPU's name and compute
    # capability, or the C++ compiler's version, the CPU and the compile flags.
    knobs: tuple = ()

    @property
    def compiles_kernels(self) -> bool:
        """Kernels are compiled for a GPU (Triton on CUDA, not interpreted)."""
        return self.name == "triton" and self.device_type == "cuda" and not self.interpreted

    def pad_matmuls(self, config) -> bool:
        """Whether this compile pads misaligned 16-bit matmuls: the option, else the target's default."""
        return self.pads_matmuls if config.pad_matmuls is None else bool(config.pad_matmuls)

    def cache_key(self) -> str:
        return hashlib.sha256(repr(dataclasses.astuple(self)).encode()).hexdigest()[:24]


def triton_target(device_type: str, interpreted: bool, knobs: tuple = ()) -> Target:
    """The Triton target for kernels on ``device_type`` tensors (CPU ones only interpreted)."""
    gpu = device_type == "cuda"
    return Target("triton", device_type, interpreted=interpreted, pads_matmuls=gpu,
                  splits_column_reductions=gpu, buffer_alignment=128, knobs=knobs)


def cpp_target(knobs: tuple = ()) -> Target:
    return Target("cpp", "cpu", fuses_column_sums=True, in_place_bf16=False, views_in_arena=False, knobs=knobs)


def default_target(device_type: str) -> Target:
    """The decisions a graph lowered without a target gets (tests of lowering and
    scheduling alone): those of the target that runs its device's kernels by default."""
    return triton_target("cuda", interpreted=False) if device_type == "cuda" else cpp_target()
