"""Graph-to-graph passes, run from one visible pipeline per IR level (``pipeline.py``).

The package imports nothing itself: a process that only loads compiled graphs imports
the pipeline runner, never the passes.
"""
