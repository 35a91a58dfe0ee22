"""TopK kernels against the numpy reference, in-process."""
import numpy as np
import pytest

from hvd_compress.kernels import topk_cpu
from hvd_compress.kernels.threads import PARALLEL_MIN

import references


@pytest.mark.parametrize("ratio", [0.001, 0.01, 0.3, 1.0])
def test_exact_matches_reference(vector, ratio):
    k = max(1, int(np.ceil(ratio * vector.size)))
    want_values, want_indices, want_residual = references.topk_exact(vector, k)
    acc = vector.copy()
    values, indices = topk_cpu.topk_exact(acc, k)
    np.testing.assert_array_equal(indices, want_indices)
    np.testing.assert_array_equal(values, want_values)
    np.testing.assert_array_equal(acc, want_residual)


def test_sampled_sends_the_largest_entries_and_keeps_the_rest(vector):
    k = max(1, vector.size // 100)
    acc = vector.copy()
    values, indices = topk_cpu.topk_sampled(acc, k)
    assert 0.8 * k <= values.size <= 1.3 * k or values.size == k
    assert np.all(np.diff(indices) > 0)
    np.testing.assert_array_equal(values, vector[indices])
    unsent = np.delete(vector, indices)
    if unsent.size:
        assert np.abs(values).min() >= np.abs(unsent).max()
    # error feedback: what was sent plus what stays is exactly the input
    rebuilt = acc.copy()
    rebuilt[indices] += values
    np.testing.assert_array_equal(rebuilt, vector)


def test_sampled_overshoot_keeps_exactly_k():
    # A sample that sees only the big plateau overestimates the count: exact re-selection.
    vector = np.ones(100_000, np.float32)
    vector[::7] = 2.0
    acc = vector.copy()
    values, indices = topk_cpu.topk_sampled(acc, 500)
    assert 400 <= values.size <= 650
    assert np.all(values == 2.0)
    np.testing.assert_array_equal(acc[indices], 0)
    assert acc.sum() == vector.sum() - values.sum()


def test_parallel_and_serial_builds_agree():
    vector = np.random.default_rng(3).standard_normal(PARALLEL_MIN + 17).astype(np.float32)
    k = 1000
    serial_acc = vector.copy()
    thr = np.float32(topk_cpu.kth_largest_magnitude(vector, k))
    above_s, equal_s = topk_cpu._count.serial(serial_acc, thr)
    above_p, equal_p = topk_cpu._count.parallel(vector.copy(), thr)
    np.testing.assert_array_equal(above_s, above_p)
    np.testing.assert_array_equal(equal_s, equal_p)
    values, indices = topk_cpu.topk_exact(vector.copy(), k)  # takes the parallel build
    want_values, want_indices, _ = references.topk_exact(vector, k)
    np.testing.assert_array_equal(indices, want_indices)


@pytest.mark.parametrize("local_ranks, threads", [("1", 2), ("2", 1), ("64", 1)])
def test_ranks_that_fill_their_host_use_the_serial_build(monkeypatch, local_ranks, threads):
    from hvd_compress.kernels import threads as pool

    monkeypatch.setattr(pool.os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setenv("HOROVOD_LOCAL_SIZE", local_ranks)
    pool.threads_per_rank.cache_clear()
    try:
        assert pool.threads_per_rank() == min(threads, pool.numba.config.NUMBA_NUM_THREADS)
    finally:
        pool.threads_per_rank.cache_clear()


def test_scatter_add_matches_reference():
    rng = np.random.default_rng(2)
    values = rng.standard_normal(500).astype(np.float32)
    indices = rng.integers(0, 100, 500).astype(np.int32)  # repeats must add up
    out, want = np.zeros(100, np.float32), np.zeros(100, np.float32)
    topk_cpu.scatter_add(values, indices, out)
    references.scatter_add(values, indices, want)
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)
