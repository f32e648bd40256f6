"""The capture frontend: CPython bytecode -> guarded torch.fx graphs.

``entry.compile_callable`` wraps a function or module; on a cache miss
``capture.capture_frame`` runs the function's bytecode symbolically
(``interpreter/``) over symbolic values (``variables/``), records tensor work
into an FX graph (``graph_builder``), collects guards (``guards``), and
``cache`` turns them into one generated check-and-run function per entry.
"""
