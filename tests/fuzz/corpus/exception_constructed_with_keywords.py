"""Exceptions built during capture keep only their positional arguments: a user
exception whose __init__ takes keywords fails with TypeError, and
ImportError(name=...) loses its name (found by
test_exceptions.ExceptionTests.testKeywordArgs and ImportErrorTests.test_attributes)."""
import torch



class Tagged(Exception):
    def __init__(self, message, tag):
        super().__init__(message)
        self.tag = tag


def f(x, n):
    try:
        raise Tagged("bad", tag=n)
    except Tagged as e:
        tag = e.tag
    return x + tag, ImportError("missing", name="mod").name


MUTATIONS = []
N_VALUES = [2]
