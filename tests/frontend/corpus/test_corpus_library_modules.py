"""torch.nn's own layers, whose forward methods are library Python code that the
frontend inlines: a sweep of common layers, losses and the transformer layers."""
import pytest
import torch
import torch.nn as nn

import surge
from corpus_harness import Args, RecordingBackend, check_module, compare_call, randn


def seq(i):
    return (randn(2, 5, 16),)


def img(i):
    return (randn(2, 4, 8, 8),)


def signal(i):
    return (randn(2, 4, 12),)


LAYERS = {
    "conv1d_bn_relu": (lambda: nn.Sequential(nn.Conv1d(4, 6, 3, padding=1), nn.BatchNorm1d(6), nn.ReLU()), signal),
    "conv_transpose": (lambda: nn.ConvTranspose2d(4, 2, 3, stride=2, padding=1, output_padding=1), img),
    "instance_norm": (lambda: nn.Sequential(nn.Conv2d(4, 4, 1), nn.InstanceNorm2d(4, affine=True)), img),
    "pixel_shuffle_upsample": (lambda: nn.Sequential(nn.Conv2d(4, 16, 1), nn.PixelShuffle(2), nn.Upsample(scale_factor=0.5)), img),
    "flatten_unflatten": (lambda: nn.Sequential(nn.Flatten(1), nn.Linear(256, 32), nn.Unflatten(1, (4, 8))), img),
    "pools": (lambda: nn.Sequential(nn.AvgPool2d(2), nn.Conv2d(4, 4, 3, padding=1), nn.AdaptiveMaxPool2d((2, 2))), img),
    "activations": (
        lambda: nn.Sequential(nn.Linear(16, 16), nn.PReLU(), nn.Hardswish(), nn.Softsign(), nn.LogSigmoid(), nn.Softmax(-1)),
        seq,
    ),
    "bilinear_identity": (lambda: nn.Sequential(nn.Identity(), nn.Linear(16, 16, bias=False), nn.Dropout(0.0)), seq),
    "embedding_bag": (lambda: nn.EmbeddingBag(20, 8, mode="mean"), lambda i: (torch.randint(0, 20, (3, 4)),)),
    "rms_norm": (lambda: nn.RMSNorm(16), seq),
    "transformer_encoder_layer": (
        lambda: nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.0, batch_first=True),
        seq,
    ),
    "transformer_decoder_layer": (
        lambda: nn.TransformerDecoderLayer(16, 2, dim_feedforward=32, dropout=0.0, batch_first=True),
        lambda i: (randn(2, 4, 16), randn(2, 5, 16)),
    ),
    "multihead_attention_masks": (
        lambda: nn.MultiheadAttention(16, 4, batch_first=True),
        lambda i: Args(
            randn(2, 5, 16), randn(2, 5, 16), randn(2, 5, 16),
            key_padding_mask=torch.tensor([[False] * 5, [False] * 3 + [True] * 2]),
            attn_mask=torch.triu(torch.ones(5, 5, dtype=torch.bool), 1),
        ),
    ),
}


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_torch_nn_layer(name):
    make_module, make_args = LAYERS[name]
    check_module(make_module(), make_args, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "loss,make_args",
    [
        (nn.CrossEntropyLoss(label_smoothing=0.1), lambda i: (randn(6, 5, requires_grad=True), torch.randint(0, 5, (6,)))),
        (nn.BCEWithLogitsLoss(pos_weight=torch.full((4,), 2.0)), lambda i: (randn(3, 4, requires_grad=True), torch.rand(3, 4))),
        (nn.MSELoss(reduction="sum"), lambda i: (randn(3, 4, requires_grad=True), randn(3, 4))),
        (nn.KLDivLoss(reduction="batchmean", log_target=True), lambda i: (randn(3, 4).log_softmax(-1), randn(3, 4).log_softmax(-1))),
        (nn.HuberLoss(delta=0.5), lambda i: (randn(3, 4, requires_grad=True), randn(3, 4))),
    ],
    ids=["cross_entropy", "bce_with_logits", "mse", "kl_div", "huber"],
)
def test_loss_module(loss, make_args):
    backend = RecordingBackend()
    compiled = surge.compile(loss, backend=backend)
    for i in range(2):
        compare_call(compiled, loss, make_args(i))
    assert len(backend.graphs) == 1 and surge.counters["fallbacks"] == 0


@pytest.mark.xfail(
    tuple(int(v) for v in torch.__version__.split(".")[:2]) < (2, 13), strict=False,
    reason="before torch 2.13, eval + no_grad takes the fused torch._transformer_encoder_layer_fwd "
           "fast path, which has no meta kernel: surge breaks the graph around it (results stay right)")
def test_transformer_encoder_stack_in_eval_under_no_grad():
    layer = nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, batch_first=True)
    encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False).eval()
    backend = RecordingBackend()
    compiled = surge.compile(encoder, backend=backend)
    with torch.no_grad():
        for i in range(2):
            compare_call(compiled, encoder, seq(i))
    assert surge.counters["fallbacks"] == 0 and len(backend.graphs) == 1
