"""What users see: the bench, the demo, and observability tools.

``phases.phase_timer`` (compile-time breakdown), ``debug_dir.write_artifact``
(``SURGE_DEBUG_DIR``), ``progress`` (status line for long compiles on a
terminal). The bench and demo modules import torch-heavy code lazily; importing
this package is cheap.
"""
