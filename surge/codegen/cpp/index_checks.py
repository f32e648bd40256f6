"""Index checks in C++ kernels: an index value out of range sets a bit, the host raises.

A gather's or scatter's index value (``IndexCheck``) is compared with its dim's size as
one unsigned comparison (a negative index is a large unsigned one); the result picks the
index or 0 (which reads and writes inside the tensor) and ORs the check's bit into the
kernel's ``surge_bad_index``: selects and an OR, no branch, so the loop still vectorizes.
Every OpenMP loop of the kernel reduces that variable with ``|``, and the kernel returns
it. Its segment returns at the first kernel that reports one, with a code naming the
kernel and the lowest bit set; the host code looks the code up in its table of errors and
raises that error (the type eager raises, the user's file and line).
"""
from __future__ import annotations

import re

FLAG = "surge_bad_index"
# bits of one kernel's flag; checks past the last bit share it
MAX_BITS = 63
_OPENMP_LOOP = re.compile(r"^\s*#pragma omp (parallel|simd)\b")


class IndexChecks:
    """The errors of one kernel's index checks, one bit each."""

    def __init__(self):
        self.errors: list = []   # (exception type name, message), by bit

    def bit(self, error: tuple) -> int:
        if error not in self.errors:
            self.errors.append(error)
        return min(self.errors.index(error), MAX_BITS - 1)

    def lines(self, index: str, size: str, error: tuple, ok: str, out: str) -> list:
        """C++ statements: ``out`` is ``index`` if it is in ``[0, size)``, else 0 and the bit set."""
        return [f"const bool {ok} = static_cast<uint64_t>({index}) < static_cast<uint64_t>({size});",
                f"{FLAG} |= {ok} ? int64_t(0) : (int64_t(1) << {self.bit(error)});",
                f"const int64_t {out} = {ok} ? {index} : int64_t(0);"]

    def wrap(self, body: list) -> list:
        """The kernel body's lines with the flag declared and reduced by every OpenMP loop."""
        if not self.errors:
            return body
        clause = f" reduction(|:{FLAG})"
        return [f"int64_t {FLAG} = 0;"] + [line + clause if _OPENMP_LOOP.match(line) else line
                                            for line in body] + [f"return {FLAG};"]

    def by_bit(self) -> dict:
        """bit -> (exception type name, message); the last bit's checks share one message."""
        out = {b: e for b, e in enumerate(self.errors[:MAX_BITS - 1])}
        rest = self.errors[MAX_BITS - 1:]
        if rest:
            out[MAX_BITS - 1] = (rest[0][0], " or ".join(m for _, m in rest))
        return out


def segment_call(kernel_number: int, call: str) -> str:
    """A kernel's call in its segment: the segment returns the code of a reported index."""
    return (f"    if (const int64_t bad = {call}) return ({kernel_number} << 6) + __builtin_ctzll(bad) + 1;")


def error_code(kernel_number: int, bit: int) -> int:
    """The code ``segment_call`` returns for ``bit`` of kernel ``kernel_number``."""
    return (kernel_number << 6) + bit + 1
