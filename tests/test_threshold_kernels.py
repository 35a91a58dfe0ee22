"""Threshold kernels (kernels/threshold_{cpu,cuda}.py, built on TopK's) against the numpy
reference: every |acc| > thr taken, the rest left as the residual."""
import numpy as np
import pytest
from numba import cuda

from hvd_compress.kernels import sparse_cpu, threshold_cpu, threshold_cuda

import references
from conftest import ADVERSARIAL
from kernel_builds import build  # noqa: F401  (fixture)


def thresholds(vector: np.ndarray) -> list[float]:
    """Below everything, at quantiles, exactly at an entry's magnitude (ties stay), above all,
    the smallest and largest float32."""
    mags = np.abs(vector)
    picks = [0.0, float(np.quantile(mags, 0.5)), float(np.quantile(mags, 0.99)), float(mags.max()),
             float(mags[mags.size // 2]), float(np.finfo(np.float32).tiny), 1e-45, 3e38]
    return picks


def check(vector, values, indices, residual, thr):
    want_values, want_indices, want_residual = references.threshold(vector, thr)
    order = np.argsort(indices, kind="stable")
    np.testing.assert_array_equal(indices[order], want_indices)
    np.testing.assert_array_equal(values[order], want_values)
    np.testing.assert_array_equal(residual, want_residual)


def test_select_matches_the_reference(vector, build):
    for thr in thresholds(vector):
        acc = vector.copy()
        values, indices = threshold_cpu.select(acc, thr)
        assert np.all(np.diff(indices) > 0)
        check(vector, values, indices, acc, thr)
        out = np.zeros_like(vector)
        sparse_cpu.scatter_add(values, indices, out)  # the decoder the method uses
        np.testing.assert_array_equal(out + acc, vector)


@pytest.mark.parametrize("n", [1, 7, 8, 1_000_003])
def test_sizes(build, n):
    vector = (np.random.default_rng(n).standard_normal(n) * 0.01).astype(np.float32)
    for thr in (0.005, 0.02, 1.0):
        acc = vector.copy()
        values, indices = threshold_cpu.select(acc, thr)
        check(vector, values, indices, acc, thr)


@pytest.mark.parametrize("case", sorted(ADVERSARIAL))
def test_cuda_matches_the_reference(case):
    vector = ADVERSARIAL[case]
    for thr in thresholds(vector):
        acc = cuda.to_device(vector)
        values, indices = threshold_cuda.select(acc, thr)
        values, indices = values.copy_to_host(), indices.copy_to_host()
        check(vector, values, indices, acc.copy_to_host(), thr)
