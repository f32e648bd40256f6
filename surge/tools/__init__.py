"""What users see: the bench, the demo, the workloads they run.

The observability helpers these use live in ``surge.observe`` (any layer may
call them). The bench and demo modules import torch-heavy code lazily;
importing this package is cheap.
"""
