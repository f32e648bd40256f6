"""Every import surge makes at run time is a declared dependency.

A subprocess hides every installed top-level package that is neither in the
standard library nor reachable from pyproject's ``dependencies`` (torch, sympy,
bytecode and what they require in turn): numpy, triton, transformers, pytest, ...
Then it imports every surge module and compiles a small function with each backend
that runs on the CPU. The list of hidden packages is derived from pyproject and the
installed distributions' metadata, never written by hand.
"""
import ast
import json
import os
import pkgutil
import re
import subprocess
import sys
import textwrap
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def normalized(dist_name: str) -> str:
    return re.sub(r"[-_.]+", "-", dist_name).lower()


def runtime_distributions(requirements: list[str]) -> set[str]:
    """The distributions ``requirements`` need here, with what they require in turn
    (extras not asked for and markers false on this interpreter are left out)."""
    needed, todo = set(), [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        name = normalized(req.name)
        if name in needed:
            continue
        needed.add(name)
        try:
            todo += [Requirement(r) for r in metadata.requires(req.name) or ()]
        except metadata.PackageNotFoundError:
            pass  # an optional platform dependency not installed here has nothing to allow
    return needed


def top_level_names(distributions: set[str]) -> set[str]:
    return {top for top, dists in metadata.packages_distributions().items()
            if any(normalized(d) in distributions for d in dists)}


def optional_top_level_names() -> set[str]:
    extras = {normalized(Requirement(r).name)
              for reqs in PYPROJECT.get("optional-dependencies", {}).values() for r in reqs}
    # An extra not installed here has no metadata: its import name is its own name then.
    return top_level_names(extras) | {name.replace("-", "_") for name in extras}


def hidden_packages() -> list[str]:
    allowed = top_level_names(runtime_distributions(PYPROJECT["dependencies"]))
    allowed |= set(sys.stdlib_module_names) | {"surge"}
    installed = {m.name for m in pkgutil.iter_modules() if not m.name.startswith("_")}
    return sorted(installed - allowed)


# The child: hide the packages, import all of surge, compile with each CPU backend.
CHILD = textwrap.dedent(r'''
    import importlib, json, pkgutil, sys
    for name in json.loads(sys.argv[1]):
        if name not in sys.modules:   # the interpreter's own start-up stays as it is
            sys.modules[name] = None  # "import name" now raises ModuleNotFoundError
    import torch
    import surge

    import_errors = {}
    def failed(module_name):
        error = sys.exc_info()[1]
        import_errors[module_name] = getattr(error, "name", None) or repr(error)
    for info in pkgutil.walk_packages(surge.__path__, "surge.", onerror=failed):
        try:
            importlib.import_module(info.name)
        except ImportError as error:
            import_errors[info.name] = error.name or repr(error)

    def block(x, w, b):
        return torch.nn.functional.gelu(x @ w + b) * torch.sigmoid(x).sum(-1, keepdim=True)

    runs = {}
    for backend in ("eager", "aot_eager", "cpp", None):
        surge.reset()
        surge.counters.reset()
        compiled = surge.compile(block, backend=backend)
        max_error = 0.0
        for seed in (0, 1):
            gen = torch.Generator().manual_seed(seed)
            x, w, b = (torch.randn(s, generator=gen) for s in ((8, 16), (16, 16), (16,)))
            max_error = max(max_error, float((compiled(x, w, b) - block(x, w, b)).abs().max()))
        # A training step too: the backward's trace, partition and kernels.
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.LayerNorm(16), torch.nn.GELU())
        compiled_model = surge.compile(model, backend=backend)
        x = torch.randn(4, 16)
        compiled_model(x).square().mean().backward()
        grads = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        model(x).square().mean().backward()
        for got, want in zip(grads, (p.grad for p in model.parameters())):
            max_error = max(max_error, float((got - want).abs().max()))
        counts = dict(surge.counters)
        runs[str(backend)] = {"graphs": counts.get("graphs", 0), "fallbacks": counts.get("fallbacks", 0),
                              "kernels": counts.get("kernels", 0), "max_error": max_error}
    print(json.dumps({"import_errors": import_errors, "runs": runs,
                      "numpy_loaded": sys.modules.get("numpy") is not None,
                      "triton_loaded": sys.modules.get("triton") is not None}))
''')


def imported_top_level_names(path: Path) -> set[str]:
    """Every absolute import in a module, also those inside functions."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name.partition(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.partition(".")[0])
    return names


def test_every_import_in_the_source_is_declared():
    declared = top_level_names(runtime_distributions(PYPROJECT["dependencies"]))
    declared |= set(sys.stdlib_module_names) | {"surge", "__future__"} | optional_top_level_names()
    undeclared = {}
    for path in sorted((ROOT / "surge").rglob("*.py")):
        for name in imported_top_level_names(path) - declared:
            undeclared.setdefault(name, []).append(str(path.relative_to(ROOT)))
    assert not undeclared, f"imports of packages pyproject does not declare: {undeclared}"


def test_the_hidden_list_is_derived_from_pyproject():
    hidden = hidden_packages()
    # A CUDA build of torch requires triton itself; the CPU build does not.
    torch_needs = {re.match(r"[A-Za-z0-9_.-]+", r).group(0).lower()
                   for r in metadata.requires("torch") or [] if "extra ==" not in r}
    # Installed here for the tests, and not what a fresh `pip install -e .` brings.
    for name in ("numpy", "pytest", "triton", "transformers", "expecttest"):
        if name in {m.name for m in pkgutil.iter_modules()} and name not in torch_needs:
            assert name in hidden
    for name in ("torch", "sympy", "bytecode", "mpmath", "jinja2", "surge", "json"):
        assert name not in hidden


def test_surge_runs_on_its_declared_dependencies_alone(tmp_path):
    env = dict(os.environ, SURGE_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(hidden_packages())], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    # A module may need a package only through an optional extra (the Triton backend needs
    # triton); anything else missing is an undeclared dependency.
    optional = optional_top_level_names()
    undeclared = {m: missing for m, missing in report["import_errors"].items()
                  if missing.partition(".")[0] not in optional}
    assert not undeclared, f"surge modules import undeclared packages: {undeclared}"
    assert not report["numpy_loaded"] and not report["triton_loaded"]
    for backend, run in report["runs"].items():
        assert run["graphs"] > 0 and run["fallbacks"] == 0, (backend, run, proc.stderr[-3000:])
        assert run["max_error"] < 1e-4, (backend, run)
        if backend in ("cpp", "None"):
            assert run["kernels"] > 0, (backend, run)
