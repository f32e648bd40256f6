"""Run one generated program eagerly and compiled by surge, call by call, and say
where they first differ.

The program's source is executed twice, into two separate module namespaces
(written to a file, so tracebacks and surge's messages name real lines): one
side calls ``f`` as written, the other ``surge.compile(f, backend=BACKEND)``. The
calls: ``f(x, n)`` for each of ``N_VALUES``, the first one again (a cache hit),
then each of ``MUTATIONS`` executed in both namespaces followed by another call
(stale-cache probes). Every call gets a fresh random ``x`` (the same values on both
sides). After each call the two sides must agree on the return value (values and
structure), the exception raised (type and message), what was printed, the input
tensor afterwards (in-place ops), the module state in ``prelude.OBSERVED``, and
which builtins the call left rebound (put back after each call).
"""
from __future__ import annotations

import builtins
import contextlib
import dataclasses
import io
import math
import os
import sys
import tempfile
import types

import torch

import surge

from . import prelude


@dataclasses.dataclass
class Difference:
    step: str      # which call: "call 1 (n=2)", "after mutation 'G = 3'"
    aspect: str    # result / exception / stdout / input / state / builtins
    detail: str

    def __str__(self) -> str:
        return f"{self.step}: {self.aspect} differs: {self.detail}"


def freeze(value, depth: int = 0):
    """A comparable snapshot of a value: tensors cloned, containers rebuilt, user
    objects as their type name and attributes."""
    if depth > 6:
        return repr(value)
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [freeze(v, depth + 1) for v in value])
    if isinstance(value, dict):
        return ("dict", [(k, freeze(v, depth + 1)) for k, v in value.items()])
    if isinstance(value, (int, float, str, bool, type(None))):
        return value
    if hasattr(value, "__dict__") and not isinstance(value, type):
        return (type(value).__name__, freeze(vars(value), depth + 1))
    return repr(value)


def first_difference(a, b, path: str = "") -> str | None:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return f"{path}: {type(a).__name__} != {type(b).__name__}"
        if a.shape != b.shape or a.dtype != b.dtype:
            return f"{path}: {a.dtype}{list(a.shape)} != {b.dtype}{list(b.shape)}"
        if not torch.allclose(a, b, rtol=1e-4, atol=1e-5, equal_nan=True):
            return f"{path}: {a} != {b}"
        return None
    if type(a) is not type(b):
        return f"{path}: {a!r} != {b!r}"
    if isinstance(a, float):
        return None if math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-6) or (a != a and b != b) else f"{path}: {a} != {b}"
    if isinstance(a, (list, tuple)):
        if len(a) != len(b):
            return f"{path}: {a!r} != {b!r}"
        for k, (x, y) in enumerate(zip(a, b)):
            found = first_difference(x, y, f"{path}[{k}]")
            if found:
                return found
        return None
    return None if a == b else f"{path}: {a!r} != {b!r}"


def snapshot(ns: dict):
    state = []
    for name in prelude.OBSERVED:
        head, _, attr = name.partition(".")
        if head in ns:
            value = getattr(ns[head], attr) if attr else ns[head]
            state.append((name, freeze(value)))
    return state


def observe(fn, x: torch.Tensor, n: int, ns: dict) -> dict:
    out = io.StringIO()
    result, exception = None, None
    saved_builtins = dict(vars(builtins))
    with contextlib.redirect_stdout(out):
        try:
            result = freeze(fn(x, n))
        except Exception as e:  # noqa: BLE001 - compared with eager's
            exception = (type(e).__name__, str(e))
    return {"result": result, "exception": exception, "stdout": out.getvalue(),
            "input": x.detach().clone(), "state": snapshot(ns), "builtins": restore_builtins(saved_builtins)}


def restore_builtins(saved: dict) -> list[str]:
    """Names in builtins the call left rebound, put back (so that one wrong run does
    not break every later one)."""
    current = vars(builtins)
    changed = sorted(k for k in set(saved) | set(current) if current.get(k) is not saved.get(k))
    for name in changed:
        if name in saved:
            current[name] = saved[name]
        else:
            del current[name]
    return changed


MODULE_NAME = "fuzz_program"


def load(path: str) -> types.ModuleType:
    """The program as a module (in sys.modules while its code runs, as a real module is:
    dataclasses and typing look their class's module up there)."""
    module = types.ModuleType(MODULE_NAME)
    module.__file__ = path
    with open(path) as f:
        code = compile(f.read(), path, "exec")
    with as_current(module):
        exec(code, module.__dict__)
    return module


@contextlib.contextmanager
def as_current(module: types.ModuleType):
    sys.modules[MODULE_NAME] = module
    try:
        yield
    finally:
        sys.modules.pop(MODULE_NAME, None)


def check_file(path: str, backend: str | None = None) -> Difference | None:
    """Run the program in ``path`` both ways; the first difference, or None."""
    eager_module, compiled_module = load(path), load(path)
    eager_ns, compiled_ns = vars(eager_module), vars(compiled_module)
    backend = backend if backend is not None else eager_ns.get("BACKEND", "eager")
    compiled = surge.compile(compiled_ns["f"], backend=None if backend == "default" else backend)
    n_values = eager_ns["N_VALUES"]
    steps = [(f"call {k + 1} (n={n})", None, n) for k, n in enumerate(n_values)]
    steps.append((f"call {len(n_values) + 1} (n={n_values[0]}, again)", None, n_values[0]))
    steps += [(f"call after mutation {m!r}", m, n_values[0]) for m in eager_ns["MUTATIONS"]]
    generator = torch.Generator().manual_seed(0)
    surge.reset()
    try:
        for step, mutation, n in steps:
            x = torch.randn(3, generator=generator)
            with as_current(eager_module):
                if mutation is not None:
                    exec(mutation, eager_ns)
                expected = observe(eager_ns["f"], x.clone(), n, eager_ns)
            with as_current(compiled_module):
                if mutation is not None:
                    exec(mutation, compiled_ns)
                actual = observe(compiled, x.clone(), n, compiled_ns)
            for aspect in ("exception", "result", "stdout", "input", "state", "builtins"):
                found = first_difference(actual[aspect], expected[aspect], aspect)
                if found:
                    return Difference(step, aspect, found[:300])
    finally:
        surge.reset()
    return None


def check_source(source: str, backend: str | None = None) -> Difference | None:
    """``check_file`` on a program given as text (written to a temporary file)."""
    with tempfile.TemporaryDirectory(prefix="surge-fuzz-") as folder:
        path = os.path.join(folder, "fuzz_program.py")
        with open(path, "w") as f:
            f.write(source)
        return check_file(path, backend)
