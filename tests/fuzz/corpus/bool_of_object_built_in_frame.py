"""The truth value of an object built during capture ignored its class's __bool__
and __len__ (found by test_bool.BoolTest.test_bool_called_at_least_once)."""
import torch


class Counted:
    def __init__(self, size):
        self.size = size
        self.asked = 0

    def __bool__(self):
        self.asked += 1
        return self.size > 1


class Sized:
    def __init__(self, size):
        self.size = size

    def __len__(self):
        return self.size


def f(x, n):
    counted = Counted(n)
    first = x * 2 if counted else x - 2
    second = x + 1 if Sized(n - 1) else x - 1
    return first, second, counted.asked, not Sized(0)


MUTATIONS = []
N_VALUES = [0, 3, 1]
