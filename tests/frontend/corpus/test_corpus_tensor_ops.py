"""Torch functions, Tensor methods, operators, properties and torch.nn.functional,
each captured into one graph and compared with eager on fresh inputs."""
import math

import pytest
import torch
import torch.nn.functional as F

import surge
from corpus_harness import check_fn, randn


def two_mats(i):
    return randn(4, 6), randn(6, 5)


def one_mat(i):
    return (randn(4, 6),)


def two_same(i):
    return randn(4, 6), randn(4, 6)


def batch3(i):
    return (randn(2, 3, 8),)


# --- torch functions ------------------------------------------------------------------

def relu_matmul_plus_one(x, y):
    return torch.relu(x @ y) + 1


def gelu_block(x, w, b, r):
    return F.gelu(x @ w + b) + r


def gelu_block_args(i):
    return randn(4, 8), randn(8, 8), randn(8), randn(4, 8)


def sigmoid_tanh_mix(x, y):
    return torch.sigmoid(x) * torch.tanh(y) - torch.exp(-x.abs())


def cat_and_stack(x, y):
    both = torch.cat([x, y], dim=0)
    stacked = torch.stack((x, y), dim=-1)
    return both.sum(0), stacked.mean(-1)


def where_and_clamp(x, y):
    return torch.where(x > y, x, y).clamp(min=-0.5, max=0.5)


def softmax_logsumexp(x):
    return torch.softmax(x, dim=-1), torch.logsumexp(x, dim=1), F.log_softmax(x, -1)


def reductions(x):
    return x.sum(), x.mean(dim=0), x.amax(dim=1), x.var(dim=1, unbiased=False), x.norm()


def arange_and_zeros_like(x):
    ramp = torch.arange(x.shape[1], dtype=x.dtype)
    return x + ramp + torch.zeros_like(x) + torch.ones(x.shape[0], 1)


def full_and_eye(x):
    return x[:4, :4] @ torch.eye(4) + torch.full((4, 4), 0.5)


def einsum_bmm(x):
    w = x.transpose(1, 2)
    return torch.einsum("bij,bjk->bik", x, w), torch.bmm(x, w)


def matmul_chain(x, y):
    return torch.mm(x, y), torch.matmul(x, y).t(), torch.addmm(torch.ones(5), x, y)


def trig_math(x):
    return torch.sin(x) ** 2 + torch.cos(x) ** 2 - torch.atan2(x, x.abs() + 1)


def cumulative(x):
    return torch.cumsum(x, dim=1), torch.cumprod(x.sigmoid(), dim=0)


def sort_topk(x):
    values, indices = torch.sort(x, dim=1, descending=True)
    top = torch.topk(x, k=2, dim=1)
    return values, indices, top.values, top.indices


def argmax_gather(x):
    idx = x.argmax(dim=1, keepdim=True)
    return torch.gather(x, 1, idx), idx


def masked_fill_tril(x):
    mask = torch.tril(torch.ones(4, 6, dtype=torch.bool))
    return x.masked_fill(~mask, float("-inf")).softmax(-1)


def outer_and_broadcast(x):
    col = x[:, :1]
    row = x[:1, :]
    return col * row, torch.outer(x[:, 0], x[0])


# --- Tensor methods and views ---------------------------------------------------------

def view_reshape_permute(x):
    b, t, c = x.shape
    heads = x.view(b, t, 2, c // 2).permute(0, 2, 1, 3)
    return heads.reshape(b * 2, t, c // 2).contiguous()


def flatten_unsqueeze(x):
    return x.flatten(1).unsqueeze(0).squeeze(0), x.unsqueeze(-1).expand(-1, -1, -1, 3)


def chunk_split(x):
    a, b = x.chunk(2, dim=-1)
    parts = x.split([2, 4], dim=1)
    return a * b, parts[0].sum() + parts[1].sum()


def transpose_properties(x):
    return x.T @ x, x.mT.shape, x.t().contiguous()


def type_conversions(x):
    return x.to(torch.float64) * 2, x.double().float(), (x > 0).int().sum(), x.half().float()


def new_tensors_from_methods(x):
    return x.new_zeros(3), x.new_ones((2, 2)), x.new_full((2,), 7.0), x.new_empty(0).numel()


def size_dim_numel(x):
    scale = x.size(-1) * x.dim() + x.numel()
    return x * scale, x.size(), x.ndim


def repeat_flip_roll(x):
    return x.repeat(2, 1), x.flip(0), torch.roll(x, shifts=1, dims=1)


def index_select_and_fancy(x):
    rows = torch.tensor([2, 0])
    return x.index_select(0, rows), x[rows], x[:, [1, 3]]


# --- operators ------------------------------------------------------------------------

def arithmetic_operators(x, y):
    return x + y, x - y, x * y, x / (y.abs() + 1), -x, x ** 2, 2 ** x.clamp(max=3)


def comparison_and_logic(x, y):
    gt = x > y
    le = x <= y
    return gt & ~le | (x == y), (gt ^ le).all(), x != y


def floor_div_and_mod(x, y):
    return x // (y.abs() + 0.5), torch.remainder(x, 1.5), x % 2.0


def reverse_operators(x):
    return 1 - x, 2 / (x.abs() + 1), 3 * x, 0.5 + x


def augmented_assignment(x, y):
    z = x.clone()
    z += y
    z *= 2
    z -= x
    z /= 3
    return z


def inplace_on_intermediate(x):
    h = x @ x.t()
    h.add_(1.0)
    h.mul_(0.5).relu_()
    return h


def matmul_operator_batched(x):
    return x @ x.transpose(-2, -1) @ x


def indexing_and_slicing(x):
    return x[0], x[-1, 1:], x[::2, 1::2], x[..., 2], x[None, :, 0]


def setitem_on_clone(x):
    y = x.clone()
    y[:, 0] = 0.0
    y[1] = y[1] * 10
    return y


def tensor_negative_step_via_flip(x):
    # Tensors do not take negative slice steps; flip is how users reverse them.
    return x.flip(-1)[:, :3]


# --- torch.nn.functional ---------------------------------------------------------------

def functional_activations(x):
    return F.silu(x), F.leaky_relu(x, 0.1), F.elu(x), F.softplus(x), F.hardtanh(x), F.mish(x)


def functional_linear_layernorm(x, w, b):
    h = F.linear(x, w, b)
    return F.layer_norm(h, (h.shape[-1],)), F.normalize(h, dim=-1)


def functional_linear_args(i):
    return randn(3, 8), randn(5, 8), randn(5)


def functional_losses(x, y):
    target = torch.tensor([1, 0, 3, 2])
    return F.mse_loss(x, y), F.cross_entropy(x, target), F.smooth_l1_loss(x, y, beta=0.5)


def functional_conv_pool(x, w):
    h = F.conv2d(x, w, padding=1)
    return F.max_pool2d(h, 2), F.avg_pool2d(h, 2), F.adaptive_avg_pool2d(h, 1).flatten(1)


def conv_args(i):
    return randn(2, 3, 8, 8), randn(4, 3, 3, 3)


def functional_pad_interpolate(x):
    return F.pad(x, (1, 2)), F.interpolate(x.unsqueeze(0), scale_factor=2, mode="nearest")


def functional_one_hot_embedding(w):
    ids = torch.tensor([[0, 2, 1], [3, 3, 0]])
    return F.embedding(ids, w), F.one_hot(ids, num_classes=4).float() @ w


def functional_scaled_dot_product(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def sdpa_args(i):
    return randn(2, 2, 5, 4), randn(2, 2, 5, 4), randn(2, 2, 5, 4)


def attention_by_hand(x, wq, wk, wv):
    q, k, v = x @ wq, x @ wk, x @ wv
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    t = x.shape[1]
    causal = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
    scores = scores.masked_fill(causal, float("-inf"))
    return scores.softmax(dim=-1) @ v


def attention_args(i):
    return randn(2, 5, 8), randn(8, 8), randn(8, 8), randn(8, 8)


def layer_norm_by_hand(x, gamma, beta):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + 1e-5) * gamma + beta


def layer_norm_args(i):
    return randn(3, 8), randn(8), randn(8)


def rms_norm_by_hand(x, weight):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * weight


def rms_args(i):
    return randn(2, 3, 8), randn(8)


def dtype_and_device_properties(x):
    y = torch.zeros(2, dtype=x.dtype, device=x.device)
    return y, x.dtype, x.device, x.is_floating_point(), x.requires_grad


def int_tensor_ops(x):
    ids = (x * 10).long()
    return ids.sum(dim=1), ids // 3, (ids % 4 == 0).sum(), ids.float().mean()


CASES = [
    (relu_matmul_plus_one, two_mats),
    (gelu_block, gelu_block_args),
    (sigmoid_tanh_mix, two_same),
    (cat_and_stack, two_same),
    (where_and_clamp, two_same),
    (softmax_logsumexp, one_mat),
    (reductions, one_mat),
    (arange_and_zeros_like, one_mat),
    (full_and_eye, one_mat),
    (einsum_bmm, batch3),
    (matmul_chain, two_mats),
    (trig_math, one_mat),
    (cumulative, one_mat),
    (sort_topk, one_mat),
    (argmax_gather, one_mat),
    (masked_fill_tril, one_mat),
    (outer_and_broadcast, one_mat),
    (view_reshape_permute, batch3),
    (flatten_unsqueeze, batch3),
    (chunk_split, one_mat),
    (transpose_properties, one_mat),
    (type_conversions, one_mat),
    (new_tensors_from_methods, one_mat),
    (size_dim_numel, batch3),
    (repeat_flip_roll, one_mat),
    (index_select_and_fancy, one_mat),
    (arithmetic_operators, two_same),
    (comparison_and_logic, two_same),
    (floor_div_and_mod, two_same),
    (reverse_operators, one_mat),
    (augmented_assignment, two_same),
    (inplace_on_intermediate, one_mat),
    (matmul_operator_batched, batch3),
    (indexing_and_slicing, one_mat),
    (setitem_on_clone, one_mat),
    (tensor_negative_step_via_flip, one_mat),
    (functional_activations, one_mat),
    (functional_linear_layernorm, functional_linear_args),
    (functional_losses, lambda i: (randn(4, 5), randn(4, 5))),
    (functional_conv_pool, conv_args),
    (functional_pad_interpolate, batch3),
    (functional_one_hot_embedding, lambda i: (randn(4, 3),)),
    (functional_scaled_dot_product, sdpa_args),
    (attention_by_hand, attention_args),
    (layer_norm_by_hand, layer_norm_args),
    (rms_norm_by_hand, rms_args),
    (dtype_and_device_properties, one_mat),
    (int_tensor_ops, one_mat),
]


@pytest.mark.parametrize("program,make_args", CASES, ids=[fn.__name__ for fn, _ in CASES])
def test_tensor_program(program, make_args):
    check_fn(program, make_args)


def test_tensor_ops_appear_in_graph():
    backend = check_fn(relu_matmul_plus_one, two_mats)
    names = " ".join(backend.op_names())
    assert "relu" in names and ("matmul" in names or "mm" in names), names
    assert backend.placeholder_count() == 2


def test_graph_nodes_carry_metadata_and_user_location():
    backend = check_fn(gelu_block, gelu_block_args)
    nodes = [n for n in backend.graphs[0].graph.nodes if n.op.startswith("call_")]
    assert nodes
    for node in nodes:
        assert "val" in node.meta, f"{node} has no metadata"
        assert "test_corpus_tensor_ops.py" in str(node.meta.get("stack_trace", "")), node.meta


def test_inputs_requiring_grad_backprop_through_graph():
    def mlp(x, w1, w2):
        return (torch.tanh(x @ w1) @ w2).pow(2).mean()

    def make(i):
        return randn(4, 6), randn(6, 8, requires_grad=True), randn(8, 2, requires_grad=True)

    check_fn(mlp, make)
    compiled = surge.compile(mlp)
    x, w1, w2 = make(0)
    compiled(x, w1, w2).backward()
    w1e, w2e = w1.detach().clone().requires_grad_(), w2.detach().clone().requires_grad_()
    mlp(x, w1e, w2e).backward()
    torch.testing.assert_close(w1.grad, w1e.grad)
    torch.testing.assert_close(w2.grad, w2e.grad)


def linalg_and_fft(x):
    q, r = torch.linalg.qr(x)
    spectrum = torch.fft.rfft(x, dim=-1)
    return (
        torch.linalg.vector_norm(x, ord=2, dim=-1),
        torch.linalg.matrix_norm(x),
        q @ r,
        spectrum.abs(),
        torch.fft.irfft(spectrum, n=x.shape[-1]),
        torch.linalg.qr(x).R.diagonal(),
    )


def distributions_log_prob(mu, log_sigma, x):
    normal = torch.distributions.Normal(mu, log_sigma.exp(), validate_args=False)
    cat = torch.distributions.Categorical(logits=mu, validate_args=False)
    return normal.log_prob(x).sum(-1), normal.entropy().mean(), cat.entropy(), cat.log_prob(torch.tensor([0, 1, 2]))


def test_linalg_and_fft_program():
    check_fn(linalg_and_fft, lambda i: (randn(4, 4),), rtol=1e-4, atol=1e-5)


def test_distributions_program():
    check_fn(distributions_log_prob, lambda i: (randn(3, 4), randn(3, 4) * 0.1, randn(3, 4)), rtol=1e-4, atol=1e-5)
