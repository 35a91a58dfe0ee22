"""CUDA kernels against the numpy references.

On a machine without a GPU they run under Numba's CUDA simulator (tests/conftest.py turns it on
before Numba loads), on small sizes since the simulator runs each GPU thread in Python.
"""
import numpy as np
import pytest
from numba import cuda

from hvd_compress.kernels import adacomp_cuda, onebit_cuda, sparse_cuda, topk_cuda

import references
from conftest import ADVERSARIAL

CASES = sorted(ADVERSARIAL)


def sorted_by_index(values, indices):
    order = np.argsort(indices)
    return values[order], indices[order]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("exact", [True, False])
def test_topk(case, exact):
    vector = ADVERSARIAL[case]
    k = max(1, vector.size // 50)
    acc = cuda.to_device(vector)
    values, indices = topk_cuda.select(acc, k, exact)
    values, indices = sorted_by_index(values.copy_to_host(), indices.copy_to_host())
    residual = acc.copy_to_host()
    _, want_indices, _ = references.topk_exact(vector, k)
    threshold = np.abs(vector[want_indices]).min()
    if exact and threshold > 0:
        assert values.size == k
    assert len(set(indices)) == indices.size
    np.testing.assert_array_equal(values, vector[indices])
    np.testing.assert_array_equal(residual[indices], 0)
    unsent = np.delete(vector, indices)
    if values.size and unsent.size:
        assert np.abs(values).min() >= np.abs(unsent).max() or not exact
        assert np.abs(values).min() >= threshold
    rebuilt = residual.copy()
    rebuilt[indices] += values
    np.testing.assert_array_equal(rebuilt, vector)
    out = cuda.to_device(np.zeros_like(vector))
    sparse_cuda.scatter_add(cuda.to_device(values), cuda.to_device(indices), out)
    want = np.zeros_like(vector)
    references.scatter_add(values, indices, want)
    np.testing.assert_array_equal(out.copy_to_host(), want)


def test_radix_select_finds_the_kth_largest_magnitude():
    vector = np.random.default_rng(4).standard_normal(1000).astype(np.float32)
    for k in (1, 17, 1000):
        got = topk_cuda.kth_largest_magnitude(cuda.to_device(vector), k)
        assert got == np.sort(np.abs(vector))[-k]


@pytest.mark.parametrize("case", ["random", "odd_length", "ties", "negative_zero", "length_1"])
@pytest.mark.parametrize("scaling, groups", [("means", 1), ("l1", 1), ("means", 5)])
def test_onebit(case, scaling, groups):
    vector = ADVERSARIAL.get(case, np.random.default_rng(8).standard_normal(2003).astype(np.float32))
    groups = min(groups, vector.size)
    low_ref, high_ref, bits_ref, residual_ref = references.onebit(vector, groups, scaling)
    acc = cuda.to_device(vector)
    low, high, bits = onebit_cuda.quantize(acc, groups, scaling)
    np.testing.assert_array_equal(bits.copy_to_host(), bits_ref)
    np.testing.assert_allclose(low.copy_to_host(), low_ref, rtol=1e-6)
    np.testing.assert_allclose(high.copy_to_host(), high_ref, rtol=1e-6)
    np.testing.assert_allclose(acc.copy_to_host(), residual_ref, rtol=1e-5, atol=1e-6)
    out = cuda.to_device(np.zeros_like(vector))
    onebit_cuda.dequantize_add(bits, low, high, out)
    want = references.onebit_decode(bits_ref, low.copy_to_host(), high.copy_to_host(), vector.size)
    np.testing.assert_array_equal(out.copy_to_host(), want)


@pytest.mark.parametrize("case", ["random", "odd_length", "ties", "zeros", "one_huge", "length_1"])
@pytest.mark.parametrize("bin_size", [7, 50])
def test_adacomp(case, bin_size):
    vector = ADVERSARIAL.get(case, np.random.default_rng(9).standard_normal(2003).astype(np.float32))
    grad = (np.random.default_rng(1).standard_normal(vector.size) * 0.5).astype(np.float32)
    scale_ref, codes_ref, residual_ref = references.adacomp(vector, grad, bin_size)
    acc = cuda.to_device(vector)
    scale, codes = adacomp_cuda.select(acc, cuda.to_device(grad), bin_size)
    codes = codes.copy_to_host()
    index = np.where(codes >= 0, codes, ~codes)
    np.testing.assert_array_equal(np.sort(codes[np.argsort(index)]), np.sort(codes_ref))
    assert scale == pytest.approx(scale_ref, rel=1e-6)
    np.testing.assert_allclose(acc.copy_to_host(), residual_ref, rtol=1e-6, atol=1e-30)
    out = cuda.to_device(np.zeros_like(vector))
    adacomp_cuda.decode_add(cuda.to_device(np.float32([scale])), cuda.to_device(codes), out)
    np.testing.assert_array_equal(out.copy_to_host(),
                                  references.adacomp_decode(np.float32(scale), codes, vector.size))
