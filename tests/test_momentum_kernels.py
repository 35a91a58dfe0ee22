"""Momentum kernels (kernels/momentum_{cpu,cuda}.py: DGC's momentum correction and Signum)
against the numpy reference."""
import numpy as np
import pytest
from numba import cuda

from hvd_compress.kernels import momentum_cpu, momentum_cuda

import references
from conftest import ADVERSARIAL
from kernel_builds import build  # noqa: F401  (fixture)

COEFFICIENTS = [(0.9, 1.0), (0.0, 1.0), (0.9, 0.1), (0.5, 0.5), (0.0, 0.0)]


def inputs(vector: np.ndarray):
    rng = np.random.default_rng(vector.size)
    grad = (vector * np.float32(0.5)).astype(np.float32)
    u = rng.standard_normal(vector.size).astype(np.float32)
    return grad + grad, grad, u  # acc = residual + grad, the residual also half the vector


@pytest.mark.parametrize("decay, gain", COEFFICIENTS)
def test_accumulate_matches_the_reference(vector, build, decay, gain):
    acc, grad, u = inputs(vector)
    want_acc, want_u = references.momentum(acc, grad, u, decay, gain)
    momentum_cpu.accumulate(acc, grad, u, decay, gain)
    np.testing.assert_array_equal(u, want_u)
    np.testing.assert_array_equal(acc, want_acc)


@pytest.mark.parametrize("n", [1, 7, 8, 1_000_003])
def test_sizes_and_no_residual_gives_u_exactly(build, n):
    grad = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    u = np.random.default_rng(n + 1).standard_normal(n).astype(np.float32) * np.float32(1e-6)
    acc = grad.copy()  # error feedback off: the buffer holds the gradient alone
    want_acc, want_u = references.momentum(acc, grad, u, 0.9, 1.0)
    momentum_cpu.accumulate(acc, grad, u, 0.9, 1.0)
    np.testing.assert_array_equal(acc, want_acc)
    np.testing.assert_array_equal(acc, u)  # (g - g) + u == u, however small u is


def test_mask_zeroes_exactly_the_indices():
    u = np.arange(1, 11, dtype=np.float32)
    momentum_cpu.mask(u, np.int32([0, 9, 4]))
    np.testing.assert_array_equal(u, [0, 2, 3, 4, 0, 6, 7, 8, 9, 0])
    momentum_cpu.mask(u, np.int32([]))
    assert u.sum() == 39


@pytest.mark.parametrize("case", sorted(ADVERSARIAL))
@pytest.mark.parametrize("decay, gain", COEFFICIENTS[:3])
def test_cuda_matches_the_reference(case, decay, gain):
    acc, grad, u = inputs(ADVERSARIAL[case])
    want_acc, want_u = references.momentum(acc, grad, u, decay, gain)
    d_acc, d_u = cuda.to_device(acc), cuda.to_device(u)
    momentum_cuda.accumulate(d_acc, cuda.to_device(grad), d_u, decay, gain)
    # a GPU may contract a*b + c into one fused multiply-add: equal up to its rounding
    np.testing.assert_allclose(d_u.copy_to_host(), want_u, rtol=1e-6, atol=1e-38)
    np.testing.assert_allclose(d_acc.copy_to_host(), want_acc, rtol=1e-6, atol=1e-6)
    index = np.int32([0, acc.size - 1])
    momentum_cuda.mask(d_u, cuda.to_device(index))
    assert np.all(d_u.copy_to_host()[index] == 0)
