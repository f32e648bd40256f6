"""A symbolic-size kernel's loop nest, emitted once, over a range of its parallel loops.

A static kernel knows when it is generated whether it runs on the OpenMP team; a
symbolic one decides when it runs. An OpenMP loop whose ``if`` clause is false still
runs GCC's outlined body, which GCC often leaves unvectorized (a GELU over 8192 floats
took 75x the time of the serial loop: bench/NOTES.md), and emitting the nest twice, once
per form, made g++ read twice the source. So the nest is one function,
``NAME_rows(params, x_begin, x_end)``, over the range [x_begin, x_end) of the flattened
index of the outer loops the team shares (those a ``collapse`` clause would join). It is
kept out of line (``noinline, noclone``): g++ compiles it once, with its ``__restrict__``
parameters and its ``omp simd`` loops, and does not copy it for either call. The kernel
calls it from each thread of an ``omp parallel`` region on that thread's part of the
range (``surge_thread_range``, prelude.py) for enough work, else once on the whole range.
"""
from __future__ import annotations

import re

from .index_checks import FLAG, IndexChecks


def _operand(c: str) -> str:
    """``c`` as an operand of ``/`` or ``%``."""
    return c if re.fullmatch(r"\w+", c) else f"({c})"


def range_loop(prefix: str, sizes: list, strides: list, lines: list, pragma: str | None) -> list:
    """The loops over ``sizes`` (C texts; ``strides[k]``: the product of the sizes after k)
    around ``lines``, as one loop over [x_begin, x_end) of their flattened index.

    Several loops keep their indices as counters: the range's first point is found with
    divisions once, then each step advances the innermost index and carries into the next.
    ``pragma`` goes above the loop of a single one (its ``omp simd``)."""
    indent = ["    " + line for line in lines]
    if len(sizes) == 1:
        head = [pragma] if pragma else []
        return head + [f"for (int64_t {prefix}0 = x_begin; {prefix}0 < x_end; ++{prefix}0) {{"] + indent + ["}"]
    starts = []
    for k, (size, stride) in enumerate(zip(sizes, strides)):
        quotient = "x_begin" if stride == "1" else f"x_begin / {_operand(stride)}"
        starts.append(f"int64_t {prefix}{k} = {quotient if k == 0 else f'{quotient} % {_operand(size)}'};")
    step = f"++{prefix}0;"
    for k in range(1, len(sizes)):
        step = f"if (++{prefix}{k} == {sizes[k]}) {{ {prefix}{k} = 0; {step} }}"
    return starts + [f"for (int64_t {prefix}c = x_begin; {prefix}c < x_end; ++{prefix}c) {{"] + indent \
        + [f"    {step}", "}"]


def rows_and_kernel(name: str, result: str, params: list, args: list, body: list, extent: str, work: str,
                    min_work: int, checks: IndexChecks) -> list:
    """Lines of the rows function (``body``, the nest over the range) and of the kernel
    ``name`` that calls it: on the OpenMP team when ``work`` reaches ``min_work``, else on
    one thread. ``extent`` is the length of the shared range; the rows function is only
    called on a non-empty part of it (its first point's divisions need non-zero sizes)."""
    def call(begin: str, end: str) -> str:
        text = f"{name}_rows({', '.join(args + [begin, end])});"
        return f"{FLAG} |= {text}" if checks.errors else text

    kernel = [f"if ({work} >= {min_work}) {{",
              "    #pragma omp parallel",
              "    {",
              "        int64_t x_begin, x_end;",
              f"        surge_thread_range({extent}, x_begin, x_end);",
              f"        if (x_begin < x_end) {call('x_begin', 'x_end')}",
              "    }",
              f"}} else if ({extent} > 0) {{",
              f"    {call('0', extent)}",
              "}"]
    rows_params = ", ".join(params + ["int64_t x_begin", "int64_t x_end"])
    return ([f"__attribute__((noinline, noclone)) static {result} {name}_rows({rows_params}) {{"]
            + ["    " + line for line in checks.wrap(body)] + ["}", ""]
            + [f"static {result} {name}({', '.join(params)}) {{"]
            + ["    " + line for line in checks.wrap(kernel)] + ["}"])
