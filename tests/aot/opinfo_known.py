"""Ops of the OpInfo sweep that run eagerly (aot raised Unsupported), and why.

Written by ``python -m tests.aot.opinfo_sweep --write-known``; mirrored in docs/aot.md.
"""

KNOWN_FALLBACKS = {
    'item': "aten._local_scalar_dense: reads a tensor's value into Python (.item(), int(t), if t: ...); a static graph cannot hold it",
    'allclose': 'aten.allclose: returns a Python bool computed from tensor data; a static graph cannot hold it',
    'combinations': 'aten.masked_select: its output size depends on tensor data; a static graph cannot hold it',
    'corrcoef': 'aten.equal: returns a Python bool computed from tensor data; a static graph cannot hold it',
    # torch 2.11's quantile checks its q with torch.equal (2.13's does not)
    'quantile': 'aten.equal: returns a Python bool computed from tensor data; a static graph cannot hold it',
    'nanquantile': 'aten.equal: returns a Python bool computed from tensor data; a static graph cannot hold it',
    'cov': 'aten.equal: returns a Python bool computed from tensor data; a static graph cannot hold it',
    'equal': 'aten.equal: returns a Python bool computed from tensor data; a static graph cannot hold it',
    'sparse.sampled_addmm': 'input arg0 is a torch.sparse_csr tensor; surge traces strided tensors only',
    'sparse.mm.reduce': 'input arg0 is a torch.sparse_csr tensor; surge traces strided tensors only',
    'geqrf': 'aten.geqrf.default has no meta kernel, so surge cannot trace it (aten::geqrf: attempted to run this operator with Meta tensors, but there was no fake ',
    'masked_select': 'aten.masked_select: its output size depends on tensor data; a static graph cannot hold it',
    'nn.functional.multi_margin_loss': 'tracing the backward failed: aten.multi_margin_loss_backward.default has no meta kernel, so surge cannot trace it (aten::multi_margin_loss_backward: a',
    'nn.functional.multilabel_margin_loss': 'tracing the backward failed: aten.multilabel_margin_loss_backward.default has no meta kernel, so surge cannot trace it (aten::multilabel_margin_loss_b',
    'nn.functional.fractional_max_pool3d': 'tracing the backward failed: aten.fractional_max_pool3d_backward.default has no meta kernel, so surge cannot trace it (aten::fractional_max_pool3d_bac',
    'nn.functional.rrelu': 'aten.rrelu_with_noise.default mutates its arguments and surge has no functional form for it',
    'tensor_split': 'tracing failed: RuntimeError: The tensor has a non-zero number of elements, but its data is not allocated yet.',
    'unique': 'aten._unique2: its output size depends on tensor data; a static graph cannot hold it',
    'unique_consecutive': 'aten.unique_consecutive: its output size depends on tensor data; a static graph cannot hold it',
    'histogram': 'aten.histogram.bin_ct has no meta kernel, so surge cannot trace it (aten::histogram.bin_ct: attempted to run this operator with Meta tensors, but ther',
    'histogramdd': 'aten._histogramdd_bin_edges.default has no meta kernel, so surge cannot trace it (aten::_histogramdd_bin_edges: attempted to run this operator with Me',
    'bucketize': 'prims.item.default cannot be traced on meta tensors: Cannot cast tensor(94561065291888) to number',
    'resize_': "aten.resize_.default changes a tensor's sizes or strides in place; use the out-of-place form",
    'resize_as_': "aten.resize_as_.default changes a tensor's sizes or strides in place; use the out-of-place form",
    'to_sparse': 'aten._to_sparse.default has no meta kernel, so surge cannot trace it (aten::_to_sparse: attempted to run this operator with Meta tensors, but there wa',
    'nonzero': 'aten.nonzero: its output size depends on tensor data; a static graph cannot hold it',
    'argwhere': 'aten.nonzero: its output size depends on tensor data; a static graph cannot hold it',
    'nn.functional.ctc_loss': 'tracing the backward failed: aten._ctc_loss_backward.default has no meta kernel, so surge cannot trace it (aten::_ctc_loss_backward: attempted to run ',
    'nn.functional.gaussian_nll_loss': "aten._local_scalar_dense: reads a tensor's value into Python (.item(), int(t), if t: ...); a static graph cannot hold it",
    'fft.hfft': "tracing the backward failed: aten.view_as_real.default cannot be traced on meta tensors: view_as_real doesn't work on unresolved conjugated tensors.  ",
    'linalg.lstsq': 'aten.linalg_lstsq.default has no meta kernel, so surge cannot trace it (aten::linalg_lstsq.out: attempted to run this operator with Meta tensors, but ',
    'linalg.lstsq.grad_oriented': 'aten.linalg_lstsq.default has no meta kernel, so surge cannot trace it (aten::linalg_lstsq.out: attempted to run this operator with Meta tensors, but ',
    'linalg.vector_norm': "tracing the backward failed: aten.pow.Scalar cannot be traced on meta tensors: aten::pow() Expected a value of type 'number' for argument 'self' but i",
}
