"""The interpreter crashes (segmentation fault, during garbage collection at exit)
after this function ran compiled: a loop whose body catches two exception types,
then dict() of objects defined in the frame that iterate (found by
test_descr.ClassPropertiesAndMethods.test_dict_constructors; test_dataclasses
crashes too). Run in a child process by test_crashes.py."""
import torch

import surge

def f(x):
    for bad in 0, "0":
        try:
            dict(bad)
        except TypeError:
            pass
        except ValueError:
            pass

    class Entry:
        def __init__(self, first, last):
            self.first = first
            self.last = last

        def __iter__(self):
            return iter([self.first, self.last])

    d = dict([Entry("Tim", "Warsaw"), Entry("Barry", "Peters")])
    return x + len(d)


if __name__ == "__main__":
    assert torch.equal(surge.compile(f, backend="eager")(torch.ones(2)), f(torch.ones(2)))
