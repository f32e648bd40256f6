"""Compiled modules share everything with the original; submodules are inlined."""
import torch
import torch.nn as nn
import torch.nn.functional as F

import surge
from frontend_helpers import compile_strict, same


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
        self.register_buffer("scale", torch.ones(dim))

    def forward(self, x):
        return x + self.ff(self.norm(x)) * self.scale


class Stack(nn.Module):
    def __init__(self, dim=8, depth=3):
        super().__init__()
        self.blocks = nn.ModuleList(Block(dim) for _ in range(depth))
        self.heads = nn.ModuleDict({"a": nn.Linear(dim, 2), "b": nn.Linear(dim, 3)})

    def forward(self, x):
        for i, block in enumerate(self.blocks):
            x = block(x) if i % 2 == 0 else self.blocks[i](x)
        return {name: head(x) for name, head in self.heads.items()}


def test_compiled_module_shares_state_and_modes():
    module = Stack()
    compiled, rec = compile_strict(module)
    assert isinstance(compiled, nn.Module)
    assert list(compiled.state_dict()) == list(module.state_dict())
    assert [id(p) for p in compiled.parameters()] == [id(p) for p in module.parameters()]
    compiled.eval()
    assert not module.training and not module.blocks[0].training
    compiled.train()
    assert module.training
    assert compiled.heads is module.heads  # attribute reads fall through
    compiled.extra_flag = 3
    assert module.extra_flag == 3


def test_module_forward_and_gradients_match_eager():
    module = Stack()
    compiled, rec = compile_strict(module)
    for _ in range(2):
        x = torch.randn(2, 8)
        same(compiled(x), module(x))
    assert len(rec.graphs) == 1
    x = torch.randn(2, 8)
    loss = sum(v.sum() for v in compiled(x).values())
    grads = torch.autograd.grad(loss, list(module.parameters()))
    ref = torch.autograd.grad(sum(v.sum() for v in module(x).values()), list(module.parameters()))
    for g, r in zip(grads, ref):
        torch.testing.assert_close(g, r)


def test_parameters_are_graph_inputs_read_at_each_call():
    module = nn.Linear(3, 3)
    compiled, rec = compile_strict(module)
    x = torch.randn(2, 3)
    same(compiled(x), module(x))
    with torch.no_grad():
        module.weight.mul_(2)
    same(compiled(x), module(x))
    module.weight = nn.Parameter(torch.randn(3, 3))
    same(compiled(x), module(x))
    assert len(rec.graphs) == 1
    placeholders = [n.meta["source"] for n in rec.graphs[0].graph.nodes if n.op == "placeholder"]
    assert any(s.endswith(".weight") for s in placeholders)
    module.double()
    same(compiled(x.double()), module(x.double()))
    assert len(rec.graphs) == 2


def test_load_state_dict_through_the_compiled_module():
    module, other = nn.Linear(4, 4), nn.Linear(4, 4)
    compiled, _ = compile_strict(module)
    compiled.load_state_dict(other.state_dict())
    torch.testing.assert_close(module.weight, other.weight)


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x):
        return F.adaptive_avg_pool2d(F.relu(self.bn(self.conv(x))), 1).flatten(1)


def test_batchnorm_in_train_and_eval():
    module = ConvNet()
    reference = ConvNet()
    reference.load_state_dict(module.state_dict())
    compiled, rec = compile_strict(module)
    x = torch.randn(2, 3, 5, 5)
    same(compiled(x), reference(x))
    torch.testing.assert_close(module.bn.running_mean, reference.bn.running_mean)
    assert module.bn.num_batches_tracked == 1
    module.eval()
    reference.eval()
    same(compiled(x), reference(x))
    assert len(rec.graphs) == 2


def test_recurrent_module_is_captured():
    lstm = nn.LSTM(4, 6, batch_first=True)
    compiled, rec = compile_strict(lstm, fullgraph=True)
    x = torch.randn(2, 3, 4)
    same(compiled(x), lstm(x))
    assert len(rec.graphs) == 1


def test_bound_method_compiles_with_its_object():
    module = nn.Linear(2, 2)
    compiled = surge.compile(module.forward)
    x = torch.randn(1, 2)
    same(compiled(x), module(x))


def test_hooks_on_the_compiled_module_itself_run():
    module = nn.Linear(3, 3)
    compiled, rec = compile_strict(module)
    module.register_forward_pre_hook(lambda m, inputs: (inputs[0] * 2,))
    module.register_forward_hook(lambda m, inputs, output: output + 1)
    x = torch.randn(2, 3)
    same(compiled(x), module(x))
    assert len(rec.graphs) == 1
