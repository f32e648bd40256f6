"""Result layouts that depend on the device an op runs on, which meta kernels cannot know.

Tracing runs every op on meta tensors. For most ops the meta kernel lays the result
out exactly as the real kernel does, but a convolution's memory format is chosen by
the backend that runs it (cuDNN, oneDNN, the native depthwise kernel, ...), and the
meta kernel always answers "contiguous". On CUDA a channels-last input or weight
gives a channels-last result; on the CPU oneDNN does the same for a channels-last
input. A wrong answer is not wrong results (the host wrapper checks strides at run
time) but a copy per convolution per call, and kernels around the convolution that
read it against its real layout.

``device_result(func, meta_args, meta_kwargs, meta_out, device)`` corrects such
results: ATen's own backend choice is asked with storage-less probe tensors that
carry the real device, shape, strides and dtype.
"""
from __future__ import annotations

import torch

aten = torch.ops.aten

_CONVOLUTIONS = (aten.convolution.default, aten._convolution.default)


class _Probe(torch.Tensor):
    """Shape, strides, dtype and device without storage: what ATen's backend choice reads."""

    @staticmethod
    def __new__(cls, shape, stride, dtype, device):
        return torch.Tensor._make_wrapper_subclass(cls, shape, strides=stride, dtype=dtype, device=device)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        raise RuntimeError(f"a layout probe does not compute ({func})")


def _probe(t: torch.Tensor, device, unsqueeze: bool) -> _Probe:
    shape, stride = list(t.shape), list(t.stride())
    if unsqueeze:   # ATen treats a 1-d convolution as a 2-d one of height 1 (contiguous input)
        shape.insert(2, 1)
        stride = list(torch.empty(shape, device="meta").stride())
    return _Probe(tuple(shape), tuple(stride), t.dtype, device)


def _in_format(t: torch.Tensor, memory_format) -> torch.Tensor:
    if t.dim() == 3 and memory_format is torch.channels_last:
        return t.unsqueeze(2).contiguous(memory_format=memory_format).squeeze(2)
    if t.dim() in (4, 5) or memory_format is torch.contiguous_format:
        return t.contiguous(memory_format=memory_format)
    return t


def convolution_memory_format(inp: torch.Tensor, weight: torch.Tensor, device, stride, padding, dilation,
                              transposed, output_padding, groups, bias=None, bias_sizes=None):
    """The memory format ATen gives a convolution's results on ``device`` (None: unknown)."""
    if inp.dim() not in (3, 4, 5) or weight.dim() != inp.dim():
        return None
    one_d = inp.dim() == 3
    p_in, p_weight = _probe(inp, device, False), _probe(weight, device, False)
    p_bias = _Probe(tuple(bias.shape), tuple(bias.stride()), bias.dtype, device) if bias is not None else None
    try:
        backend = torch._C._select_conv_backend(p_in, p_weight, p_bias, list(stride), list(padding),
                                                list(dilation), bool(transposed), list(output_padding),
                                                int(groups), None if p_bias is not None else bias_sizes)
        if one_d:
            p_in, p_weight = _probe(inp, device, True), _probe(weight, device, True)
        return torch._C._conv_determine_backend_memory_format(p_in, p_weight, backend)
    except (RuntimeError, TypeError):   # a build without that backend's hooks: keep the meta answer
        return None


def device_result(func, args, kwargs, meta_out, device):
    """``meta_out`` (the meta kernel's result of ``func``) with the layout ``device`` gives it."""
    if device is None or torch.device(device).type == "meta":
        return meta_out
    if func in _CONVOLUTIONS and len(args) >= 9:
        inp, weight, bias = args[0], args[1], args[2]
        fmt = convolution_memory_format(inp, weight, device, *args[3:9], bias=bias)
        return meta_out if fmt is None else _in_format(meta_out, fmt)
    if func is aten.convolution_backward.default and len(args) >= 10:
        grad_out, inp, weight, bias_sizes = args[0], args[1], args[2], args[3]
        fmt = convolution_memory_format(inp, weight, device, *args[4:10], bias_sizes=bias_sizes)
        if fmt is None:
            return meta_out
        grad_in, grad_weight, grad_bias = meta_out
        return (_in_format(grad_in, fmt) if grad_in is not None else None,
                _in_format(grad_weight, fmt) if grad_weight is not None else None, grad_bias)
    return meta_out


# ------------------------------------------------------------ channels-last convolutions

_CONV2D_CALLS = frozenset({torch.conv2d, torch.nn.functional.conv2d})
_SIXTEEN_BIT = (torch.bfloat16, torch.float16)


def _computes_in_16_bit(x: torch.Tensor) -> bool:
    if x.dtype in _SIXTEEN_BIT:
        return True
    device = x.device.type
    return (x.dtype == torch.float32 and torch.is_autocast_enabled(device)
            and torch.get_autocast_dtype(device) in _SIXTEEN_BIT)


def _channels_last(t) -> bool:
    """Strided exactly as channels-last and not as contiguous: also where dims of size 1 make
    both layouts "contiguous" to torch (a 1x1 convolution's weight, a pooled (N, C, 1, 1)),
    which still differ in strides from what eager gives."""
    if not isinstance(t, torch.Tensor) or t.dim() != 4:
        return False
    shape = tuple(t.shape)
    return tuple(t.stride()) == _strides(shape, torch.channels_last) != _strides(shape, torch.contiguous_format)


def _strides(shape: tuple, memory_format) -> tuple:
    return tuple(torch.empty(shape, device="meta", memory_format=memory_format).stride())


def _eagers(t):
    """``t`` with row-major strides (``contiguous()`` would keep a tensor torch already calls
    contiguous)."""
    return t.clone(memory_format=torch.contiguous_format)


class ChannelsLastConvolutions:
    """Runs a graph's 16-bit CUDA 2-d convolutions on channels-last activations.

    cuDNN computes 16-bit convolutions in NHWC. Given NCHW activations it transposes the
    input and the weight before each convolution and the result after it: three extra
    passes over memory per convolution, about a third of a ResNet's GPU time. Converting
    the input of each such convolution once is enough: the convolution then returns
    channels-last, pointwise ops keep that layout, and the next convolution's input is
    channels-last already. Applied only to graphs whose inputs are not channels-last
    (there eager's layouts are already what cuDNN wants), and the graph's 4-d outputs go
    back to eager's contiguous layout, so callers see eager's strides.

    Training graphs too: the backward's convolutions then take and give channels-last
    gradients (cuDNN's NHWC kernels, no transposes), and the gradients of the graph's
    inputs and parameters go back to the inputs' own layouts, as eager gives them (a
    convolution's weight gradient comes out channels-last from a channels-last input).
    Their batch-norm statistics become column reductions over few channels, which
    ``lowering/split_reduction.py`` spreads over many programs.
    """

    # The device whose convolutions prefer channels-last (a class attribute: tests run the
    # policy on the CPU, where the same rewrite is exercised without a GPU).
    device_type = "cuda"

    def __init__(self):
        self.fired = False

    @classmethod
    def applies(cls, gm: torch.fx.GraphModule, example_inputs, state) -> bool:
        if not any(n.op == "call_function" and n.target in _CONV2D_CALLS for n in gm.graph.nodes):
            return False
        tensors = [t for t in list(example_inputs) + [v for _, v in state] if isinstance(t, torch.Tensor)]
        return (any(t.device.type == cls.device_type for t in tensors)
                and not any(_channels_last(t) for t in tensors))

    def arguments(self, target, args: tuple) -> tuple:
        """``args`` of a call to ``target``, the convolution input converted where it pays."""
        if target not in _CONV2D_CALLS or not args:
            return args
        x = args[0]
        if (not isinstance(x, torch.Tensor) or x.dim() != 4 or x.device.type != self.device_type
                or not _computes_in_16_bit(x) or x.is_contiguous(memory_format=torch.channels_last)):
            return args
        self.fired = True
        return (x.contiguous(memory_format=torch.channels_last),) + tuple(args[1:])

    def gradient(self, grad, inp):
        """The gradient of graph input ``inp`` as eager lays it out: a channels-last gradient
        of an input that is not channels-last, contiguous."""
        if self.fired and _channels_last(grad) and not _channels_last(inp):
            return _eagers(grad)
        return grad

    def output(self, t):
        """A graph output as eager lays it out: computed 4-d channels-last results contiguous."""
        if self.fired and _channels_last(t) and getattr(t, "_alias", None) is not None \
                and t._alias.storage.input_index is None and not t._alias.storage.constant:
            return _eagers(t)
        return t
