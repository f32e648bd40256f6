"""Bool loads of a short reduction row, widened to int32 once before the row's passes.

GCC sizes an ``omp simd`` loop's vectors by its narrowest element: with 512-bit
vectors a loop that loads a bool mask next to floats gets 64 lanes. A row shorter
than that (an attention mask row of 16 or 32 keys) never enters the vector body and
runs in GCC's epilogues, two floats at a time: a masked softmax over 16-wide rows took
4.8 ns per element. Copying the row's bytes into an ``int32_t`` array in a plain loop
(vectorized by GCC on its own) and loading that in the passes gives 16 lanes: 1.0 ns.

Measured on the masked softmax (one thread, AVX-512), ns per element before -> after:
rows of 16: 4.8 -> 1.0, 64: 1.07 -> 0.60, 128: 0.73 -> 0.64, 256: 0.55 -> 0.57,
1024: 0.42 -> 0.52; so rows up to ``MAX_ROW`` elements are staged.

Only unguarded loads are staged (a load under a mask may be out of bounds where the
mask is false), with a direct index (no gather). Only bools: uint8/int8 values are
computed in their own one-byte type anyway.
"""
from __future__ import annotations

import torch

MAX_ROW = 128


class NarrowLoads:
    def __init__(self, writer):
        self.writer = writer
        self.arrays: dict = {}    # (buffer, C index) -> staged array name

    @staticmethod
    def applies(writer) -> bool:
        # a symbolic row decides at its hint: staging is right for any length, only slower
        # than loading the bytes in place for rows much longer than MAX_ROW
        return 1 < writer.sizes.size_hint(writer.rnumel) <= MAX_ROW

    def element(self, scope, load, pointer: str, index: str) -> str | None:
        """The staged element standing for ``pointer[index]`` in this r loop, or None."""
        w = self.writer
        if scope.kind != "rloop" or load.indirect or load.dtype != torch.bool or not w.depends_on_r(load):
            return None
        key = (load.buffer, index)
        name = self.arrays.get(key)
        if name is None:
            name = self.arrays[key] = f"narrow{len(self.arrays)}"
            w.row.lines.extend(w.row_array("int32_t", name))
            w.row.lines.extend(self._staging_loop(name, f"static_cast<int32_t>({pointer}[{index}])"))
        return f"{name}[{w.r_linear()}]"

    def _staging_loop(self, name: str, value: str) -> list:
        # no omp simd: the pragma would size this loop by its bytes too
        lines = [f"{name}[{self.writer.r_linear()}] = {value};"]
        for k in reversed(range(len(self.writer.r_sizes))):
            lines = ([f"for (int64_t r{k} = 0; r{k} < {self.writer.size_text(self.writer.r_sizes[k])}; ++r{k}) {{"]
                     + ["    " + line for line in lines] + ["}"])
        return lines
