"""Graph-to-graph passes over ATen-level FX graphs, run from one visible pipeline."""
from .cse import eliminate_common_subexpressions
from .constant_fold import fold_constants
from .dce import eliminate_dead_code
from .pipeline import DEFAULT_PIPELINE, PassContext, PassStep, run_pipeline

__all__ = [
    "eliminate_dead_code", "eliminate_common_subexpressions", "fold_constants",
    "PassContext", "PassStep", "DEFAULT_PIPELINE", "run_pipeline",
]
