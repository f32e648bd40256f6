"""``SURGE_DEBUG_DIR=DIR``: every compile's artifacts on disk, a folder per graph.

Each layer writes what it made with ``write_artifact(options, graph_name,
file_name, text)``; the usual files of one graph folder are

    source.py        the user's source the graph came from (frontend)
    graph.py         the torch-level FX graph (frontend)
    guards.txt       the guard check function (frontend)
    aten_forward.py / aten_backward.py   the ATen graphs (aot)
    loop_ir.txt      the loop IR (lowering)
    schedule.txt     fused groups and memory plan (schedule)
    kernels.py / kernels.cpp            generated kernels (codegen)
    wrapper.py       the host wrapper (codegen)

and ``index.txt`` in the folder lists them, one line each, in the order they
were written. ``DIR/index.txt`` lists the graph folders. Folder names come from
``unique_graph_name`` so two compiles never overwrite each other.

Layers below the frontend do not know which graph they work for: they call
``write_current(options, file_name, text)``, which writes into the folder of the
compile open on this thread (``phases.PhaseTimer.compile``), so every artifact
of one captured graph lands in one folder. Inside ``artifact_part("backward")``
(the aot layer compiling a backward graph) file names get a ``backward_``
prefix, so the backward's kernels do not replace the forward's.
"""
from __future__ import annotations

import contextlib
import inspect
import itertools
import os
import re
import threading

INDEX_FILE = "index.txt"

_counter = itertools.count()
_lock = threading.Lock()
_part = threading.local()


def enabled(options) -> bool:
    return bool(getattr(options, "debug_dir", None))


def unique_graph_name(stem: str) -> str:
    """``stem`` made safe as a folder name, with a process-wide sequence number."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", stem).strip("_") or "graph"
    return f"{next(_counter):03d}_{safe}"


def write_artifact(options, graph_name: str, file_name: str, text: str) -> str | None:
    """Write ``text`` to ``options.debug_dir/graph_name/file_name``; None when off.

    Writing the same file again replaces it (the index keeps one line for it).
    """
    if not enabled(options):
        return None
    if os.sep in file_name or file_name in ("", ".", "..", INDEX_FILE):
        raise ValueError(f"write_artifact: bad artifact file name {file_name!r}")
    if os.sep in graph_name or graph_name in ("", ".", ".."):
        raise ValueError(f"write_artifact: bad graph folder name {graph_name!r}")
    root = options.debug_dir
    folder = os.path.join(root, graph_name)
    path = os.path.join(folder, file_name)
    with _lock:
        new_folder = not os.path.isdir(folder)
        os.makedirs(folder, exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        first_line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
        _upsert_index_line(
            os.path.join(folder, INDEX_FILE), file_name,
            f"{file_name}  ({len(text.splitlines())} lines)  {first_line[:80]}",
        )
        if new_folder:
            _upsert_index_line(os.path.join(root, INDEX_FILE), graph_name, graph_name + "/")
    return path


def write_current(options, file_name: str, text) -> str | None:
    """Write an artifact of the compile open on this thread; None when off.

    ``text`` may be a function that makes the text: it is called only when the
    debug dir is on, so printing a large IR costs nothing otherwise."""
    if not enabled(options):
        return None
    if callable(text):
        text = text()
    from .phases import phase_timer

    record = phase_timer.current_record()
    if record is None:  # written outside any compile: a folder of its own
        folder = unique_graph_name("graph")
    else:
        if record.debug_folder is None:
            record.debug_folder = unique_graph_name(record.name)
        folder = record.debug_folder
    prefix = getattr(_part, "name", None)
    return write_artifact(options, folder, f"{prefix}_{file_name}" if prefix else file_name, text)


def source_of(fn) -> str:
    """``source.py``: the user's source of ``fn``, headed by its file:line."""
    code = fn.__code__
    try:
        lines, first_line = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        return f"# {code.co_filename}:{code.co_firstlineno} (source not available)\n"
    return f"# {code.co_filename}:{first_line}\n" + "".join(lines)


@contextlib.contextmanager
def artifact_part(name: str):
    """Artifacts written inside are named ``{name}_{file_name}``."""
    outer = getattr(_part, "name", None)
    _part.name = name
    try:
        yield
    finally:
        _part.name = outer


def _upsert_index_line(index_path: str, key: str, line: str) -> None:
    lines = []
    if os.path.exists(index_path):
        with open(index_path) as f:
            lines = f.read().splitlines()
    lines = [ln for ln in lines if ln.split(" ", 1)[0] != key and ln != key + "/"]
    lines.append(line)
    with open(index_path, "w") as f:
        f.write("\n".join(lines) + "\n")


def read_artifacts(debug_dir: str) -> dict[str, dict[str, str]]:
    """All artifacts under ``debug_dir``: {graph folder: {file name: text}}, in index order."""
    result: dict[str, dict[str, str]] = {}
    top_index = os.path.join(debug_dir, INDEX_FILE)
    if not os.path.exists(top_index):
        return result
    with open(top_index) as f:
        folders = [ln.rstrip("/") for ln in f.read().splitlines() if ln.strip()]
    for folder in folders:
        path = os.path.join(debug_dir, folder)
        with open(os.path.join(path, INDEX_FILE)) as f:
            names = [ln.split(" ", 1)[0] for ln in f.read().splitlines() if ln.strip()]
        files = {}
        for name in names:
            with open(os.path.join(path, name)) as g:
                files[name] = g.read()
        result[folder] = files
    return result
