"""A bare ``raise`` in an ``except`` block re-raises the handled exception; under
surge the break at the ``raise`` runs it where no exception is active and raises
RuntimeError('No active exception to reraise') (found by the fuzzer, seed 0
program 24)."""
import torch

def f(x, n):
    y = x + 1
    try:
        int(f"x{n}")
    except ValueError:
        y = y * 2
        raise
    return y


MUTATIONS = []
N_VALUES = [0]
