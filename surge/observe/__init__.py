"""Observability every layer may use (the ground tier): compile-time phases, debug dumps, progress.

``phases.phase_timer`` (compile-time breakdown), ``debug_dir.write_artifact``
(``SURGE_DEBUG_DIR``), ``progress`` (status line for long compiles on a
terminal). None of them imports anything above the ground tier.
"""
