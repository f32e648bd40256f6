"""The layer map of DESIGN.md, checked on the source: import directions and module sizes.

Tiers, highest first: top > driver > stages > library > ground. A module imports its own
tier and the tiers below it; inside the stages tier, a stage imports itself and earlier
stages (frontend < aot < lowering < schedule < codegen < runtime), never a later one.
Every import counts: module level or inside a function, under ``TYPE_CHECKING`` or not,
relative or absolute, and ``importlib.import_module("surge....")`` with a literal name.

The known exceptions below can only shrink: an entry that no longer occurs fails the test
too, so that it is removed with the code that made it.
"""
from __future__ import annotations

import ast
import functools
import pathlib

SURGE = pathlib.Path(__file__).resolve().parent.parent / "surge"
MAX_MODULE_LINES = 800

TOP, DRIVER, STAGES, LIBRARY, GROUND = 4, 3, 2, 1, 0
TIER_NAMES = {TOP: "top", DRIVER: "driver", STAGES: "stages", LIBRARY: "library", GROUND: "ground"}
STAGE_ORDER = ("frontend", "aot", "lowering", "schedule", "codegen", "runtime")

# Where each part of surge/ sits: a dotted module name under ``surge`` or a package prefix
# (which covers its submodules; the root ``surge`` covers only surge/__init__.py). A new
# top-level module or package must be placed here.
LAYER_MAP = {
    "surge": TOP,  # surge/__init__.py: the public names
    "surge.__main__": TOP,
    "surge.api": TOP,
    "surge.tools": TOP,
    "surge.models": TOP,
    "surge.backends": DRIVER,
    **{f"surge.{stage}": STAGES for stage in STAGE_ORDER},
    "surge.passes": LIBRARY,
    "surge.options": GROUND,
    "surge.target": GROUND,  # what differs per code generator (DESIGN, contract 3)
    "surge.errors": GROUND,
    "surge.registry": GROUND,
    "surge.logs": GROUND,
    "surge.counters": GROUND,
    "surge.fallbacks": GROUND,
    "surge.observe": GROUND,
    "surge.cache_store": GROUND,  # the one disk-cache helper
}

# (importing module, imported module): why it is allowed for now, and what removes it.
KNOWN_IMPORT_EXCEPTIONS: dict[tuple[str, str], str] = {
    # The frontend resolves the backend itself. DESIGN: "the backend callable is resolved by
    # the top tier and handed in". Removed when surge.api hands the frontend the resolved
    # callable together with its name for messages and its before-capture hook.
    ("surge.frontend.entry", "surge.backends"): "lookup_backend: a name or callable -> backend",
    ("surge.frontend.cache", "surge.backends"): "before_capture: the backend's warm-up hook",
    ("surge.frontend.backend_call", "surge.backends"):
        "describe_backend and PROTOCOL: the backend's registered name and the protocol text "
        "in BackendCompilerFailed messages",
}

# module: why it may stay over MAX_MODULE_LINES for now, and how it would be split.
KNOWN_LARGE_MODULES: dict[str, str] = {}


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(SURGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@functools.cache
def _surge_modules() -> dict[str, pathlib.Path]:
    return {_module_name(p): p for p in sorted(SURGE.rglob("*.py"))}


def _placement(module: str) -> tuple[int, int] | None:
    """(tier, stage index) of a surge module from the longest matching map entry.

    ``surge`` itself names only surge/__init__.py, not everything under it."""
    if module == "surge":
        return LAYER_MAP["surge"], 0
    parts = module.split(".")
    for end in range(len(parts), 1, -1):
        tier = LAYER_MAP.get(".".join(parts[:end]))
        if tier is not None:
            stage = STAGE_ORDER.index(parts[1]) if tier == STAGES else 0
            return tier, stage
    return None


def _describe(module: str) -> str:
    tier, stage = _placement(module)
    return STAGE_ORDER[stage] if tier == STAGES else TIER_NAMES[tier]


def _resolve_from(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module a ``from ... import`` names before its imported names."""
    if node.level == 0:
        return node.module or ""
    package = module.split(".") if is_package else module.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _literal_import_module(node: ast.Call) -> str | None:
    """The name in ``importlib.import_module("...")`` / ``__import__("...")`` with a literal."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name not in ("import_module", "__import__") or not node.args:
        return None
    first = node.args[0]
    if isinstance(first, ast.Constant) and isinstance(first.value, str):
        return first.value
    return None


def _imports(module: str, source: str, is_package: bool, known: set[str], filename: str = ""):
    """Yield (line, imported module) for every import the module's source makes."""
    for node in ast.walk(ast.parse(source, filename=filename)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = _resolve_from(module, is_package, node)
            for alias in node.names:
                # ``from pkg import sub`` imports the submodule when there is one.
                submodule = f"{base}.{alias.name}"
                yield node.lineno, submodule if submodule in known else base
        elif isinstance(node, ast.Call):
            name = _literal_import_module(node)
            if name is not None:
                yield node.lineno, name


def _surge_imports():
    """(importer, line, imported) for every import of a surge module inside surge/."""
    modules = _surge_modules()
    known = set(modules)
    for module, path in modules.items():
        source, is_package = path.read_text(), path.name == "__init__.py"
        for line, target in _imports(module, source, is_package, known, str(path)):
            if target == "surge" or target.startswith("surge."):
                yield module, line, target


def _goes_up(importer: str, target: str) -> bool:
    (tier_from, stage_from), (tier_to, stage_to) = _placement(importer), _placement(target)
    if tier_to != tier_from:
        return tier_to > tier_from
    return tier_from == STAGES and stage_to > stage_from


SCANNER_EXAMPLE = """
import importlib
from typing import TYPE_CHECKING

import torch
import surge.lowering.ir
from . import sizes
from ..codegen import wrapper
from ..errors import Unsupported

if TYPE_CHECKING:
    from ..runtime.launcher import Launcher


def later():
    from ..schedule.groups import KernelGroup
    return importlib.import_module("surge.backends.cpp")
"""


def test_the_scanner_sees_every_kind_of_import_and_judges_its_direction():
    known = {"surge.lowering.sizes", "surge.lowering.ir", "surge.codegen.wrapper"}
    found = sorted(_imports("surge.lowering.example", SCANNER_EXAMPLE, False, known))
    assert found == [(2, "importlib"), (3, "typing"), (5, "torch"), (6, "surge.lowering.ir"),
                     (7, "surge.lowering.sizes"), (8, "surge.codegen.wrapper"), (9, "surge.errors"),
                     (12, "surge.runtime.launcher"), (16, "surge.schedule.groups"),
                     (17, "surge.backends.cpp")]
    up = [target for _, target in found
          if target.startswith("surge.") and _goes_up("surge.lowering.example", target)]
    assert up == ["surge.codegen.wrapper", "surge.runtime.launcher", "surge.schedule.groups",
                  "surge.backends.cpp"]
    # In a package's __init__, one dot is the package itself.
    package_import = ast.parse("from .markers import graph_break").body[0]
    assert _resolve_from("surge.frontend", True, package_import) == "surge.frontend.markers"
    assert _resolve_from("surge.frontend.entry", False, package_import) == "surge.frontend.markers"
    assert _placement("surge.observe.phases") == (GROUND, 0)
    assert _placement("surge.frontend.variables.builtins") == (STAGES, 0)
    assert _placement("surge.not_in_the_map") is None
    assert not _goes_up("surge.tools.demo", "surge.observe.phases")
    assert _goes_up("surge.observe.phases", "surge.tools.progress")
    assert _goes_up("surge.passes.dce", "surge.aot.capture")
    assert not _goes_up("surge.runtime.launcher", "surge.frontend.markers")


def test_every_module_is_placed_in_the_layer_map():
    unplaced = sorted(m for m in _surge_modules() if _placement(m) is None)
    assert not unplaced, (
        "modules outside the layer map; place them in LAYER_MAP of tests/test_architecture.py "
        "(see DESIGN.md, 'The pipeline and where it lives'):\n  " + "\n  ".join(unplaced)
    )


def test_imports_go_down_the_tiers_and_forward_through_the_stages():
    found: dict[tuple[str, str], set[str]] = {}
    for importer, line, target in _surge_imports():
        if _placement(importer) and _placement(target) and _goes_up(importer, target):
            found.setdefault((importer, target), set()).add(
                f"{_modules_path(importer)}:{line} -> {target} "
                f"({_describe(importer)} imports {_describe(target)})"
            )
    new = [site for pair, sites in sorted(found.items()) if pair not in KNOWN_IMPORT_EXCEPTIONS
           for site in sorted(sites, key=_by_file_and_line)]
    stale = sorted(pair for pair in KNOWN_IMPORT_EXCEPTIONS if pair not in found)
    message = []
    if new:
        message.append("imports against the layer order of DESIGN.md:\n  " + "\n  ".join(new))
    if stale:
        message.append("known exceptions that no longer occur; remove them from "
                       "KNOWN_IMPORT_EXCEPTIONS:\n  "
                       + "\n  ".join(f"{a} -> {b}" for a, b in stale))
    assert not message, "\n".join(message)


def test_modules_stay_small():
    sizes = {m: len(p.read_text().splitlines()) for m, p in _surge_modules().items()}
    large = sorted(m for m, n in sizes.items() if n > MAX_MODULE_LINES)
    new = [f"{_modules_path(m)}: {sizes[m]} lines" for m in large if m not in KNOWN_LARGE_MODULES]
    stale = sorted(set(KNOWN_LARGE_MODULES) - set(large))
    message = []
    if new:
        message.append(f"modules over {MAX_MODULE_LINES} lines; split them by concept:\n  "
                       + "\n  ".join(new))
    if stale:
        message.append("modules no longer over the limit; remove them from "
                       "KNOWN_LARGE_MODULES:\n  " + "\n  ".join(stale))
    assert not message, "\n".join(message)


def _by_file_and_line(site: str) -> tuple[str, int]:
    where = site.split(" ", 1)[0]
    path, line = where.rsplit(":", 1)
    return path, int(line)


def _modules_path(module: str) -> str:
    return str(_surge_modules()[module].relative_to(SURGE.parent))


# The one module that reads the process environment: every setting is an ``Options`` field
# (or a function of options.py) passed down from there. The top tier (the CLI, the bench)
# is above the options and may read its own switches.
ENVIRONMENT_READER = "surge.options"


def _environment_reads(source: str, filename: str = ""):
    """Lines that read ``os.environ`` / ``os.getenv``, except ``dict(os.environ, ...)``:
    the environment handed on to a child process."""
    tree = ast.parse(source, filename=filename)
    handed_on = set()
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict"
                and node.args and _names_environment(node.args[0])):
            handed_on.add(id(node.args[0]))
    for node in ast.walk(tree):
        if _names_environment(node) and id(node) not in handed_on:
            yield node.lineno
        elif isinstance(node, ast.Attribute) and node.attr in ("getenv", "getenvb") \
                and isinstance(node.value, ast.Name) and node.value.id == "os":
            yield node.lineno
        elif isinstance(node, ast.ImportFrom) and node.module == "os" \
                and any(alias.name in ("environ", "getenv") for alias in node.names):
            yield node.lineno


def _names_environment(node) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr in ("environ", "environb")
            and isinstance(node.value, ast.Name) and node.value.id == "os")


def test_the_environment_scanner_sees_reads_and_lets_child_environments_pass():
    source = ("import os\nfrom os import getenv\na = os.environ.get('X')\nb = os.getenv('Y')\n"
              "env = dict(os.environ, Z='1')\nc = 'X' in os.environ\n")
    assert sorted(set(_environment_reads(source))) == [2, 3, 4, 6]


def test_no_environment_variable_is_read_below_the_top_tier_except_in_options():
    reads = []
    for module, path in _surge_modules().items():
        if module == ENVIRONMENT_READER or _placement(module)[0] == TOP:
            continue
        reads.extend(f"{_modules_path(module)}:{line}"
                     for line in sorted(set(_environment_reads(path.read_text(), str(path)))))
    assert not reads, ("environment reads outside options.py (make the setting an Options field, "
                       "read in Options.from_env, and pass it down):\n  " + "\n  ".join(reads))
