"""What generated kernels run on an H100/H200, counted from their sm_90 machine code (no GPU).

A kernel is compiled for ``GPUTarget("cuda", 90, 32)`` with Triton's own ptxas and
disassembled with the ``cuobjdump`` Triton ships; its SASS instructions are grouped
by the unit that executes them and divided by the elements one thread handles. This
is how the per-element work of a kernel (erf's polynomial, bf16 unpacking, masks) is
checked without a GPU: ``bench/triton_sass.py`` prints it for the benchmark
workloads, and tests hold the fused normalization kernels to it. Needs the compiled
mode (``TRITON_INTERPRET=0``): Triton fixes the mode when it is imported.

Persistent reductions and pointwise kernels are straight-line code, so the whole body
counts (a libdevice call's rarely taken slow path included, when it has one); a kernel
with a loop over r counts its innermost loop body per element of one iteration.
"""
from __future__ import annotations

import collections
import dataclasses
import os
import re
import subprocess
import tempfile

# SASS opcode (its name before the first '.') -> (group, lanes per SM and clock of the
# unit that runs it on sm_90, from CUDA's arithmetic-throughput table)
GROUPS = {
    "fp32": (("FADD", "FMUL", "FFMA", "FMNMX", "FSWZADD"), 128),
    "select/compare": (("FSEL", "FSETP", "FSET", "ISETP", "SEL", "PLOP3", "P2R", "R2P", "VOTE"), 64),
    "integer": (("IMAD", "IADD3", "IADD", "VIADD", "LOP3", "SHF", "LEA", "IABS", "IMNMX", "BMSK", "FLO", "POPC",
                 "BREV", "IDP", "IMUL", "SGXT"), 64),
    "mufu": (("MUFU",), 16),
    "convert": (("F2F", "F2I", "I2F", "F2IP", "I2FP", "FRND"), 16),
    "pack/unpack": (("F2FP", "PRMT"), 64),
    "fp16x2": (("HFMA2", "HADD2", "HMUL2", "HMNMX2", "HSETP2"), 128),
    "fp64": (("DADD", "DMUL", "DFMA", "DSETP"), 64),
    "move/const": (("MOV", "CS2R", "S2R", "S2UR", "UMOV", "ULDC", "LDC", "ULEA", "UIADD3", "USHF", "ULOP3",
                    "UIMAD", "UISETP", "USEL", "R2UR", "MOV32I", "UPLOP3", "UPRMT"), 128),
    "global ld/st": (("LDG", "STG", "LD", "ST", "LDL", "STL", "RED", "ATOM", "ATOMG"), 32),
    "shared ld/st": (("LDS", "STS", "LDSM"), 32),
    "shuffle": (("SHFL",), 32),
    "barrier": (("BAR", "MEMBAR", "DEPBAR", "WARPSYNC", "BSSY", "BSYNC"), 128),
    "control": (("BRA", "EXIT", "NOP", "RET", "CALL", "JMP", "YIELD"), 128),
}
GROUP_OF = {op: group for group, (ops, _) in GROUPS.items() for op in ops}
_LINE = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z0-9_]+)((?:\.[A-Z0-9_]+)*)\s*(.*?)\s*;")
TARGET = ("cuda", 90, 32)


@dataclasses.dataclass
class Instruction:
    address: int
    predicate: str
    opcode: str
    modifiers: str
    operands: str

    @property
    def group(self) -> str:
        """``HFMA2.MMA`` with a zero product is how ptxas loads a constant: a move."""
        if self.opcode == "HFMA2" and self.modifiers.startswith(".MMA") and "-RZ, RZ" in self.operands:
            return "move/const"
        return GROUP_OF.get(self.opcode, "other")


def _cuobjdump(cubin: bytes, flag: str) -> str:
    from triton import knobs
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return subprocess.run([knobs.nvidia.cuobjdump.path, flag, f.name], capture_output=True, text=True,
                              check=True).stdout


def disassemble(cubin: bytes) -> list:
    out = []
    for line in _cuobjdump(cubin, "-sass").splitlines():
        m = _LINE.match(line)
        if m:
            out.append(Instruction(int(m.group(1), 16), (m.group(2) or "").strip(), m.group(3), m.group(4),
                                   m.group(5)))
    return out


def registers(cubin: bytes) -> int:
    return int(re.search(r"REG:(\d+)", _cuobjdump(cubin, "-res-usage")).group(1))


def innermost_loop(instructions: list) -> list | None:
    """The instructions between a backward branch and its target (the shortest such span)."""
    spans = []
    for ins in instructions:
        target = re.search(r"0x([0-9a-f]+)", ins.operands) if ins.opcode == "BRA" else None
        if target and int(target.group(1), 16) < ins.address:
            spans.append((int(target.group(1), 16), ins.address))
    if not spans:
        return None
    start, end = min(spans, key=lambda span: span[1] - span[0])
    return [i for i in instructions if start <= i.address <= end]


def compile_for_sm90(ks, config: dict, folder: str):
    """Triton's compiled kernel of a ``KernelSource`` for sm_90."""
    from ..codegen.triton.module import kernel_file_text
    from ..codegen.triton.ops import POINTER_TYPES
    from ..runtime import compile_pool

    dtype_of = {ptr: str(dtype).replace("torch.", "") for dtype, ptr in POINTER_TYPES.items()}
    path = os.path.join(folder, f"{ks.name}_{abs(hash(ks.source)):x}.py")
    with open(path, "w") as f:
        f.write(kernel_file_text(ks.source, ks.helpers))
    message = dict(path=path, function=ks.name, config=config, target=TARGET,
                   sizes=(ks.xnumel, ks.rnumel) if ks.is_reduction else (ks.xnumel,),
                   arg_dtypes=tuple(dtype_of[t] for _, _, t in ks.params if t.startswith("*")))
    return compile_pool.compile_job(message)


def kernel_mix(ks, config: dict, folder: str) -> dict:
    """One kernel's SASS instructions per element: by group and by opcode."""
    cubin = compile_for_sm90(ks, config, folder).asm["cubin"]
    body = disassemble(cubin)
    loop = innermost_loop(body) if ks.is_reduction and not ks.persistent else None
    per_thread = config["XBLOCK"] * config.get("RBLOCK", 1) / (config["num_warps"] * 32)
    groups = collections.Counter(i.group for i in (loop or body))
    opcodes = collections.Counter(i.opcode + (i.modifiers if i.opcode in ("MUFU", "F2F", "F2FP") else "")
                                  for i in (loop or body))
    return dict(kernel=ks.name, config=config, counted="loop" if loop else "body", registers=registers(cubin),
                elements_per_thread=per_thread, instructions=len(loop or body),
                per_element={g: n / per_thread for g, n in groups.most_common()},
                total_per_element=len(loop or body) / per_thread,
                opcodes_per_element={op: round(n / per_thread, 3) for op, n in opcodes.most_common()})


def graph_mixes(aten_gm, example_inputs, config: dict | None = None) -> list:
    """Each kernel of an ATen graph (inputs may be meta tensors: nothing runs) generated as
    for a GPU and counted at its default launch config (``config`` entries override it)."""
    from ..codegen.triton.module import generate_module
    from ..lowering.lower import lower_graph
    from ..runtime.autotune import candidate_configs
    from ..runtime.triton_mode import interpreting
    from ..options import CompileConfig
    from ..schedule import schedule_graph
    from ..target import triton_target

    if interpreting():
        raise RuntimeError("counting SASS needs Triton's compiled mode (TRITON_INTERPRET=0)")
    target, compile_config = triton_target("cuda", interpreted=False), CompileConfig()   # the H200's kernels
    graph, _ = lower_graph(aten_gm, list(example_inputs), target=target, config=compile_config)
    _, kernels = generate_module(schedule_graph(graph), target, compile_config)
    out = []
    with tempfile.TemporaryDirectory() as folder:
        for ks in kernels.values():
            meta = dict(xnumel=ks.xnumel, rnumel=ks.rnumel, reduction=ks.is_reduction, persistent=ks.persistent,
                        costly_ops=ks.costly_ops, column=ks.column)
            chosen = dict(candidate_configs(meta, interpret=False)[0], **(config or {}))
            out.append(dict(kernel_mix(ks, chosen, folder), source=ks.source))
    return out
