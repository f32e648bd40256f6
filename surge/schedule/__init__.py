"""Scheduling: fusion of loop-IR buffers into kernels, ordering, memory planning."""
from .scheduler import Schedule, schedule_graph

__all__ = ["Schedule", "schedule_graph"]
