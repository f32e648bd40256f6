"""A module the entry binds from the call: every change that would change the result misses
(recompiles or re-binds) and the result matches eager afterwards; the entry stays compact."""
import copy
import re

import pytest
import torch
import torch.nn as nn

import surge
from frontend_helpers import compile_strict, same

from surge.frontend.cache import cache_for


class Block(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(channels)
        self.act = nn.ReLU()
        self.scale = 1.0

    def forward(self, x):
        return self.act(self.bn(self.conv(x)) * self.scale + x)


class Net(nn.Module):
    def __init__(self, channels=4, blocks=2):
        super().__init__()
        self.stem = nn.Conv2d(3, channels, 3, stride=2, padding=1)
        self.blocks = nn.Sequential(*[Block(channels) for _ in range(blocks)])
        self.head = nn.Linear(channels, 5)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.head(x.mean((2, 3)))


def make(seed=0):
    torch.manual_seed(seed)
    return Net().eval()


def entries(rec):
    return cache_for(Net.forward.__code__, rec, False).entries


def check(model, compiled, rec, graphs):
    """A fresh input gives eager's result, and the cache holds ``graphs`` graphs by now."""
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        same(compiled(x), model(x))
    assert len(rec.graphs) == graphs, len(rec.graphs)


@pytest.fixture
def compiled_net():
    model = make()
    compiled, rec = compile_strict(model)
    check(model, compiled, rec, 1)
    check(model, compiled, rec, 1)
    return model, compiled, rec


def test_an_equal_new_tuple_hits_and_a_different_one_recompiles(compiled_net):
    model, compiled, rec = compiled_net
    model.stem.stride = (2, 2)  # a new tuple object, equal: the structural check passes
    check(model, compiled, rec, 1)
    model.stem.stride = (1, 1)
    check(model, compiled, rec, 2)
    model.blocks[0].conv.padding = [1, 1]  # a list where a tuple was: another type
    check(model, compiled, rec, 3)


# Applied in order to one model, a fresh input after each; each misses (a new entry) or
# re-binds (an alike module where another was), and every result is eager's.
MUTATIONS = {
    "attributes": [
        lambda m: setattr(m.blocks[1].bn, "eps", 0.5),
        lambda m: setattr(m.blocks[0], "scale", 3.0),
        lambda m: setattr(m.blocks[0].bn, "momentum", 0.5) or m.train(),
        lambda m: m.eval() and m.blocks[1].train(),
        lambda m: m.eval() and None,
    ],
    "children and parameters": [
        lambda m: setattr(m.blocks[0], "act", nn.Tanh()),
        lambda m: setattr(m.blocks, "1", Block(4)),  # a new, alike block: re-bound
        lambda m: m.blocks._modules.__setitem__("0", nn.Identity()),
        lambda m: setattr(m.head, "weight", nn.Parameter(torch.randn(5, 4))),
        lambda m: m.stem.weight.requires_grad_(False),
    ],
    "tensor data": [
        lambda m: setattr(m.head.weight, "data", torch.randn(4, 5).t()),
        lambda m: setattr(m.head.weight, "data", torch.randn(7, 4)) or setattr(m.head.bias, "data", torch.randn(7)),
        lambda m: m.blocks[1].bn.register_buffer("running_var", torch.rand(4) + 0.5),
        lambda m: setattr(m.blocks[0].bn, "running_mean", torch.randn(4)),
        lambda m: [setattr(t, "data", t.data.double()) for t in [*m.parameters(), *m.buffers()]],
    ],
    "instance dicts": [
        lambda m: setattr(m.blocks[0], "forward", lambda x: x * 2),
        lambda m: object.__setattr__(m.blocks[1], "scale", -1.0),
        lambda m: m.blocks[1].__dict__.__setitem__("scale", 0.25),
        lambda m: m.blocks[1].conv.__dict__.update(padding=(2, 2), dilation=(2, 2)),
        lambda m: m.double(),
    ],
}


@pytest.mark.parametrize("group", list(MUTATIONS))
def test_each_mutation_misses_or_rebinds_and_matches_eager(group):
    model = make()
    compiled, rec = compile_strict(model, options={"cache_size_limit": 64})
    check(model, compiled, rec, 1)
    for mutate in MUTATIONS[group]:
        mutate(model)
        for _ in range(2):
            x = torch.randn(2, 3, 8, 8, dtype=model.stem.weight.dtype)
            with torch.no_grad():
                same(compiled(x), model(x))
    assert surge.counters["cache_hits"] >= len(MUTATIONS[group])  # the second call of each hit


def test_hooks_registered_and_removed(compiled_net):
    model, compiled, rec = compiled_net
    seen = []
    pre = model.blocks[1].conv.register_forward_pre_hook(lambda mod, args: (args[0] * 2,))
    post = model.blocks[0].bn.register_forward_hook(lambda mod, args, out: seen.append(1) or out + 1)
    for _ in range(2):
        x = torch.randn(2, 3, 8, 8)
        with torch.no_grad():
            expected = model(x)
            same(compiled(x), expected)
    assert len(seen) == 4  # eager and compiled, twice
    with_hooks = len(rec.graphs)
    pre.remove()
    post.remove()
    check(model, compiled, rec, with_hooks)  # the first entry's guards hold again: no new graph


def test_half_precision_and_a_class_attribute_change(compiled_net):
    model, compiled, rec = compiled_net
    model.half()
    x = torch.randn(2, 3, 8, 8, dtype=torch.half)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-2, atol=1e-2)
    assert len(rec.graphs) == 2
    model.float()
    original = Block.forward
    try:
        Block.forward = lambda self, x: x - 1
        check(model, compiled, rec, 3)
    finally:
        Block.forward = original
    check(model, compiled, rec, 3)


def test_a_second_instance_shares_the_entry_with_its_own_results():
    first, second = make(0), make(1)
    compiled_first, rec = compile_strict(first)
    compiled_second = surge.compile(second, backend=rec, options={"raise_internal_errors": True})
    for _ in range(2):
        check(first, compiled_first, rec, 1)
        check(second, compiled_second, rec, 1)
    second.blocks[1].bn.eps = 0.25  # the second instance only: a new entry, the first unchanged
    check(second, compiled_second, rec, 2)
    check(first, compiled_first, rec, 2)
    third = copy.deepcopy(first)
    check(third, surge.compile(third, backend=rec, options={"raise_internal_errors": True}), rec, 2)


def test_one_module_bound_twice_misses():
    model = make()
    compiled, rec = compile_strict(model)
    check(model, compiled, rec, 1)
    model.blocks[0] = model.blocks[1]  # the trace took them as distinct objects
    check(model, compiled, rec, 2)
    assert "the bound modules are distinct objects" in entries(rec)[0].source


def test_the_entry_of_a_resnet_like_model_stays_compact():
    model = make()
    compiled, rec = compile_strict(model)
    check(model, compiled, rec, 1)
    (entry,) = entries(rec)
    source = entry.source
    checks = source.count("return MISS")
    modules = len(list(model.modules()))
    tensors = len(list(model.parameters())) + len(list(model.buffers()))
    # A tuple attribute and its items are one check; a module costs its binding, its hooks and
    # what its forward reads; a tensor one check.
    conv_tuples = re.findall(r"if not \(v\d+ is tuple_value_\d+ or \(type\(v\d+\) is tuple_\d+ and len", source)
    assert len(conv_tuples) == 3 * sum(isinstance(m, nn.Conv2d) for m in model.modules())
    assert checks <= 5 * modules + tensors + 12, (checks, modules, tensors)
    # The weak references of modules re-bound from the call are not read.
    assert not re.search(r"Conv2d_\d+ = Conv2d_\d+_weak\(\)", source)
    # Only the classes bound more than once are in the distinctness check.
    distinct = next(line for line in source.splitlines() if line.strip().startswith("if not (len({"))
    assert "Net_" not in distinct and "Linear_" not in distinct and "Conv2d_" in distinct


class Config:
    def __init__(self, scale):
        self.scale = scale
        self.kind = "mul"


class Scaled(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config

    def forward(self, x):
        return x * self.config.scale if self.config.kind == "mul" else x + self.config.scale


def test_one_object_reached_along_several_paths_is_checked_once_and_still_guarded():
    shared = Config(2.0)
    model = nn.Sequential(Scaled(shared), Scaled(shared), Scaled(shared))
    compiled, rec = compile_strict(model)
    x = torch.randn(3)
    same(compiled(x), model(x))
    source = cache_for(nn.Sequential.forward.__code__, rec, False).entries[0].source
    assert len(re.findall(r"^\s+a\d+ = v\d+ is v\d+$", source, re.M)) == 2  # layers 1 and 2 against layer 0
    shared.scale = 3.0  # seen through every path
    same(compiled(x), model(x))
    model[2].config = Config(3.0)  # another object, alike: its own guards pass
    same(compiled(x), model(x))
    model[1].config = Config(5.0)  # another object, another value
    same(compiled(x), model(x))
    model[2].config.kind = "add"
    same(compiled(x), model(x))
    assert len(rec.graphs) == 4


class Holder(nn.Module):
    def __init__(self):
        super().__init__()
        self.pair = (torch.ones(3), 2.0)  # a tuple holding a tensor: not immutable
        self.sizes = ((1, 3), -0.0)

    def forward(self, x):
        return x * self.pair[0] * self.pair[1] + self.sizes[1] + self.sizes[0][1]


def test_a_tuple_holding_a_tensor_keeps_its_tensor_checks():
    model = Holder()
    compiled, rec = compile_strict(model)
    x = torch.randn(3)
    same(compiled(x), model(x))
    model.pair[0].data = torch.full((3,), 2.0, dtype=torch.float64)  # the same tuple object
    same(compiled(x), model(x))
    model.sizes = ((1, 3), 0.0)  # equal tuple, another object: -0.0 and 0.0 differ in sign only
    same(compiled(x), model(x))
    assert len(rec.graphs) == 3
