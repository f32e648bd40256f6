"""An abstract class (abc.ABC with an abstractmethod left) was instantiated during
capture instead of raising TypeError (found by
test_contextlib.TestAbstractContextManager.test_exit_is_abstract)."""
import abc

import torch


class Shape(abc.ABC):
    @abc.abstractmethod
    def area(self):
        ...


class Square(Shape):
    def __init__(self, side):
        self.side = side

    def area(self):
        return self.side * self.side


def f(x, n):
    y = x * Square(n).area()
    if n > 2:
        Shape()
    return y


MUTATIONS = []
N_VALUES = [1, 3]
