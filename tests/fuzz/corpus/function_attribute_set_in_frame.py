"""An attribute set on a function made in the frame was lost: setting it was a graph
break, and the resume function got the function rebuilt from its code, without
the attribute (AttributeError in the user's program). functools.update_wrapper
writes __name__, __wrapped__ and __dict__ this way (found by test_functools'
TestUpdateWrapper / TestWraps and test_contextlib's test_contextmanager_attribs)."""
import torch


def f(x, n):
    def scale(v):
        return v * n

    scale.tag = n + 1
    return scale(x), scale.tag


MUTATIONS = []
N_VALUES = [2]
