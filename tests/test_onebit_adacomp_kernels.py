"""OneBit and AdaComp CPU kernels against the numpy references, in-process."""
import numpy as np
import pytest

from hvd_compress.kernels import adacomp_cpu, onebit_cpu
from hvd_compress.kernels.threads import PARALLEL_MIN

import references
from kernel_builds import build  # noqa: F401  (fixture)

# Bin sizes that divide 64, are multiples of it, or neither (mask words shared by bins, groups
# of up to 64 bins), and 1.
ADACOMP_BINS = [1, 7, 50, 64, 96, 500, 4999]


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


def check_adacomp(acc: np.ndarray, grad: np.ndarray, bin_size: int) -> np.ndarray:
    """select() against the reference, bit for bit; returns the codes."""
    scale_ref, codes_ref, residual_ref = references.adacomp(acc, grad, bin_size)
    acc = acc.copy()
    scale, codes = adacomp_cpu.select(acc, grad, bin_size)
    np.testing.assert_array_equal(codes, codes_ref)
    assert np.float32(scale).tobytes() == np.float32(scale_ref).tobytes()
    np.testing.assert_array_equal(acc.view(np.uint32), residual_ref.view(np.uint32))
    return codes


@pytest.mark.parametrize("bin_size", ADACOMP_BINS)
def test_adacomp_matches_reference(vector, bin_size, build):
    grad = np.random.default_rng(vector.size).standard_normal(vector.size).astype(np.float32)
    grad = grad / np.abs(grad).max() * np.float32(np.abs(vector).max() or 1.0)  # comparable sizes
    codes = check_adacomp(vector, grad, bin_size)
    scale, _, _ = references.adacomp(vector, grad, bin_size)
    out = np.zeros_like(vector)
    adacomp_cpu.decode_add(np.float32([scale]), codes, out)
    np.testing.assert_array_equal(out, references.adacomp_decode(np.float32(scale), codes, vector.size))


@pytest.mark.parametrize("bin_size", ADACOMP_BINS)
@pytest.mark.parametrize("sent", ["edges", "all"])
def test_adacomp_mask_words_at_bin_and_group_edges(bin_size, sent, build):
    """Only each bin's first and last element sent, or every element: the bits at the ends of
    bins, of mask words and of groups, and a partial last group and bin."""
    n = 3 * 64 * bin_size + 5
    acc = np.full(n, 0.1, np.float32)
    acc[::bin_size] = 1.0
    acc[bin_size - 1::bin_size] = -1.0
    acc[-1] = -1.0
    grad = acc.copy() * 9 if sent == "all" else np.zeros(n, np.float32)  # |H| = 10 |G|
    codes = check_adacomp(acc, grad, bin_size)
    index = np.where(codes >= 0, codes, ~codes)
    if sent == "all":
        np.testing.assert_array_equal(index, np.arange(n))
    else:
        assert set(index) >= set(range(0, n, bin_size)) | set(range(bin_size - 1, n, bin_size))


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
