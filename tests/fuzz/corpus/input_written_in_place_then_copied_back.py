"""An input written in place (``t0[0] = ...`` then ``t0.mul_(0.5)``) under the default
(C++) backend: the host code deletes the input after the segment that last reads it, but
the final copy-back into it (``aten.copy_(arg0, buf4)``) reads it afterwards
(UnboundLocalError: arg0): the kernel's result had taken the input's storage under a new
name, and the host code dropped the input's name although the copy-back still named it.
Found by the fuzzer, seed 7, program 59."""
import torch

STATE = {"n": 1, "calls": 0}


def f(x, n):
    i0 = n
    t0 = x
    t0[0] = (i0 % (STATE["n"] % 3 + 1))
    t0.mul_(0.5)
    return t0, x * 2, torch.ones(3)


MUTATIONS = []
N_VALUES = [3]
BACKEND = 'default'
