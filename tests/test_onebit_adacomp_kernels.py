"""OneBit and AdaComp CPU kernels against the numpy references, in-process."""
import numpy as np
import pytest

from hvd_compress.kernels import adacomp_cpu, onebit_cpu
from hvd_compress.kernels.threads import PARALLEL_MIN

import references


@pytest.mark.parametrize("scaling", ["means", "l1"])
@pytest.mark.parametrize("groups", [1, 7])
def test_onebit_matches_reference(vector, scaling, groups):
    groups = min(groups, vector.size)
    low_ref, high_ref, bits_ref, residual_ref = references.onebit(vector, groups, scaling)
    acc = vector.copy()
    low, high, bits = onebit_cpu.quantize(acc, groups, scaling)
    np.testing.assert_array_equal(bits, bits_ref)
    np.testing.assert_allclose(low, low_ref, rtol=1e-6)
    np.testing.assert_allclose(high, high_ref, rtol=1e-6)
    finite = np.isfinite(residual_ref)
    np.testing.assert_allclose(acc[finite], residual_ref[finite], rtol=1e-5, atol=1e-6 * np.abs(high).max())
    out = np.zeros_like(vector)
    onebit_cpu.dequantize_add(bits, low, high, out)
    np.testing.assert_array_equal(out, references.onebit_decode(bits, low, high, vector.size))


def test_onebit_parallel_build_matches_reference():
    vector = np.random.default_rng(5).standard_normal(PARALLEL_MIN + 3).astype(np.float32)
    low_ref, high_ref, bits_ref, _ = references.onebit(vector, 1, "means")
    low, high, bits = onebit_cpu.quantize(vector.copy(), 1, "means")
    np.testing.assert_array_equal(bits, bits_ref)
    np.testing.assert_allclose([low[0], high[0]], [low_ref[0], high_ref[0]], rtol=1e-6)


@pytest.mark.parametrize("bin_size", [1, 50, 500])
def test_adacomp_matches_reference(vector, bin_size):
    grad = np.random.default_rng(vector.size).standard_normal(vector.size).astype(np.float32)
    grad = grad / np.abs(grad).max() * np.float32(np.abs(vector).max() or 1.0)  # comparable sizes
    scale_ref, codes_ref, residual_ref = references.adacomp(vector, grad, bin_size)
    acc = vector.copy()
    scale, codes = adacomp_cpu.select(acc, grad, bin_size)
    np.testing.assert_array_equal(codes, codes_ref)
    assert np.float32(scale) == pytest.approx(scale_ref, rel=1e-6)
    np.testing.assert_allclose(acc, residual_ref, rtol=1e-6, atol=1e-30)
    out = np.zeros_like(vector)
    adacomp_cpu.decode_add(np.float32([scale]), codes, out)
    np.testing.assert_array_equal(out, references.adacomp_decode(np.float32(scale), codes, vector.size))


def test_adacomp_sends_more_where_the_gradient_is_active():
    """The rate adapts: a bin whose new gradient dominates its residue sends more."""
    rng = np.random.default_rng(7)
    quiet = rng.standard_normal(5000).astype(np.float32)
    grad = np.zeros(10000, np.float32)
    grad[5000:] = rng.standard_normal(5000).astype(np.float32) * 3
    acc = np.concatenate([quiet, rng.standard_normal(5000).astype(np.float32)]) + grad
    _, codes = adacomp_cpu.select(acc, grad, 50)
    index = np.where(codes >= 0, codes, ~codes)
    assert (index >= 5000).sum() > 2 * (index < 5000).sum()
