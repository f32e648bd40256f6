"""Column sums inside a row kernel: per-thread partials, combined once.

A ``column`` member (``schedule/column_fusion.py``) sums over the kernel's x
loops (rows) and keeps one result per r point (column): the LayerNorm weight and
bias gradients inside the LayerNorm-backward row kernel. Each thread of the row
loop adds the values of its rows into its own array of column partials, in the
pass over the row where the value is available (the first pass whose results it
needs, or the last pass); after the row loop the partials are added up per
column, thread 0 first. So the result depends on the thread count, as every
OpenMP sum here does, but not on timing: rows go to threads by a static schedule.

The kernel becomes::

    std::vector<float> part_buf5(threads * columns, 0);
    #pragma omp parallel
    {
        float* __restrict__ col_buf5 = part_buf5.data() + omp_get_thread_num() * columns;
        #pragma omp for schedule(static)
        for (x0 ...) { ... col_buf5[r0] += v; ... }
    }
    for (r0 ...) { float s = 0; for (t ...) s += part_buf5[t * columns + r0]; out[r0] = s; }
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .ops import ctype
from .scope import Scope

if TYPE_CHECKING:
    from .kernel import CppKernelWriter


class ColumnSums:
    def __init__(self, writer: CppKernelWriter):
        self.writer = writer
        self.members = [m for m in writer.plan.members if m.role == "column"]
        self.columns = writer.rnumel

    @staticmethod
    def applies(writer: CppKernelWriter) -> bool:
        return any(m.role == "column" for m in writer.plan.members)

    def at_stage(self, stage: int) -> list:
        return [m for m in self.members if m.stage == stage]

    def update(self, loop: Scope, stage: int) -> None:
        """Add this pass's column values into the thread's partials."""
        w = self.writer
        for m in self.at_stage(stage):
            v = w.emit(loop, m.value).name
            loop.lines.append(f"col_{m.buffer.name}[{w.r_linear()}] += {v};")

    def wrap(self, top: Scope, row: Scope, pragmas: dict) -> None:
        """The row loop over x inside a parallel region that owns the partials, then the combine."""
        w = self.writer
        worksharing = {k: p.replace("omp parallel for", "omp for") for k, p in pragmas.items()}
        parallel = w.parallel and 0 in worksharing   # else one thread runs every row
        threads = "omp_get_max_threads()" if parallel else "1"
        top.lines.append(f"const int64_t col_threads = {threads};")
        for m in self.members:
            t = ctype(w.acc_dtype(m))
            top.lines.append(f"std::vector<{t}> part_{m.buffer.name}(col_threads * {self.columns}, {t}(0));")
        region = Scope("top", top)
        for m in self.members:
            t = ctype(w.acc_dtype(m))
            region.lines.append(f"{t}* __restrict__ col_{m.buffer.name} = part_{m.buffer.name}.data() + "
                                f"omp_get_thread_num() * {self.columns};")
        w.loop_nest(region, "x", w.x_sizes, row, worksharing)
        if parallel:
            top.lines.append("#pragma omp parallel")
        top.lines.append("{")
        top.lines.extend("    " + line for line in region.lines)
        top.lines.append("}")
        combine = Scope("rloop", top)
        for m in self.members:
            t, name = ctype(w.acc_dtype(m)), m.buffer.name
            combine.lines.append(f"{t} sum_{name} = {t}(0);")
            combine.lines.append(f"for (int64_t t = 0; t < col_threads; ++t) "
                                 f"sum_{name} += part_{name}[t * {self.columns} + {w.r_linear()}];")
            w.store_result(combine, m, f"sum_{name}")
        w.loop_nest(top, "r", w.r_sizes, combine, {})
