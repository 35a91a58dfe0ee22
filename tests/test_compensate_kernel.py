"""The fused compensation + finite-check kernel against its numpy reference, in-process."""
import numpy as np
import pytest

from hvd_compress.kernels import compensate_cpu
from hvd_compress.kernels.threads import PARALLEL_MIN

import references


@pytest.mark.parametrize("keep", [True, False])
def test_fold_matches_reference(vector, keep):
    acc = np.random.default_rng(vector.size).standard_normal(vector.size).astype(np.float32)
    want, want_bad = references.fold(acc, vector, keep)
    assert compensate_cpu.fold(acc, vector, keep) == want_bad == 0
    np.testing.assert_array_equal(acc, want)


@pytest.mark.parametrize("size", [1237, PARALLEL_MIN + 3])  # serial and parallel builds
@pytest.mark.parametrize("keep", [True, False])
def test_fold_counts_every_nan_and_inf(size, keep):
    grad = np.random.default_rng(2).standard_normal(size).astype(np.float32)
    grad[[0, 17, size - 1]] = [np.nan, np.inf, -np.inf]
    grad[5] = np.float32(np.finfo(np.float32).max)  # the largest finite value is finite
    acc = np.ones(size, np.float32)
    want, want_bad = references.fold(acc, grad, keep)
    got = compensate_cpu.fold(acc, grad, keep)
    assert got == want_bad == 3
    np.testing.assert_array_equal(acc, want)  # NaN compares equal to NaN here
