import pytest
import torch

from surge.tools import workloads
from surge.tools import bench
from surge.tools.bench import compare, compare_low_precision, float32_reference

REQUIRED = ("seed_block_fp32", "seed_block_bf16", "layernorm_gelu", "softmax", "rmsnorm_bf16",
            "pointwise_chain_60", "gpt_block", "mlp_train")


def test_the_issue_workloads_are_registered():
    assert set(REQUIRED) <= set(workloads.names())


@pytest.mark.parametrize("name", workloads.names())
def test_workload_is_deterministic_and_inputs_are_fresh(name):
    inst = workloads.build(name, "cpu", "quick")
    a, b = inst.make_inputs(0), inst.make_inputs(0)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not all(torch.equal(x, y) for x, y in zip(a, inst.make_inputs(1)))
    t1, t2 = inst.fresh_target(), inst.fresh_target()
    ok, err = compare(inst.run(t1, t1, a), inst.run(t2, t2, a), 0, 0)
    assert ok and err == 0
    if inst.training:  # a training result is the loss and every parameter's gradient
        n_params = sum(1 for p in t1.parameters() if p.requires_grad)
        assert len(inst.run(t1, t1, a)) == 1 + n_params


def test_compare_catches_wrong_values_shapes_and_structure():
    x = torch.randn(4, 4)
    assert compare([x, (x,)], [x.clone(), (x.clone(),)], 1e-6, 1e-6) == (True, 0.0)
    ok, err = compare(x + 1e-2, x, 1e-4, 1e-4)
    assert not ok and err == pytest.approx(1e-2, rel=1e-3)
    assert not compare(x.t().reshape(2, 8), x, 1, 1)[0]
    assert not compare([x], [x, x], 1, 1)[0]
    assert not compare(x.double(), x, 1, 1)[0]


def test_low_precision_results_are_judged_against_a_float32_reference():
    reference = torch.randn(256, 256)
    eager = (reference * (1 + 4e-3 * torch.randn(256, 256))).bfloat16()   # eager's own rounding
    other = (reference * (1 + 4e-3 * torch.randn(256, 256))).bfloat16()   # another correct compiler
    other[0, 0] = eager[0, 0] * 1.5  # one element far from eager's, as deep bf16 models produce
    assert compare_low_precision(other, eager, reference)[0]
    assert not compare_low_precision(eager.flip(0), eager, reference)[0]   # wrong code
    assert not compare_low_precision((reference * 1.05).bfloat16(), eager, reference)[0]  # 5% off
    nan = other.clone()
    nan[3, 3] = float("nan")
    assert not compare_low_precision(nan, eager, reference)[0]


def test_the_float32_reference_upcasts_weights_and_inputs():
    inst = workloads.build("seed_block_bf16", "cpu", "quick")
    inputs = inst.make_inputs(1)
    reference = float32_reference(inst, inputs)
    assert all(t.dtype == torch.float32 for t in bench.flatten_tensors(reference))
    assert float32_reference(workloads.build("softmax", "cpu", "quick"), inputs) is None



def test_bandwidth_workloads_count_at_least_their_input_and_output():
    inst = workloads.build("layernorm_gelu", "cpu", "quick")
    x = inst.make_inputs(0)[0]
    assert inst.bytes_moved >= 2 * x.numel() * x.element_size()
