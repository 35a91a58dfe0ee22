"""Kernels that fold the gradient into the residual, check it and compress in one pass, against
the two calls they replace (compensate_cpu.fold, then the method's selection), bit for bit."""
import numpy as np
import pytest

from hvd_compress.kernels import adacomp_cpu, compensate_cpu, onebit_cpu, topk_cpu
from hvd_compress.kernels.threads import PARALLEL_MIN


def _residual(size: int) -> np.ndarray:
    return (0.1 * np.random.default_rng(size).standard_normal(size)).astype(np.float32)


def _assert_same_topk(grad: np.ndarray, residual: np.ndarray, keep: bool, k: int) -> None:
    want_acc = residual.copy()
    assert compensate_cpu.fold(want_acc, grad, keep) == 0
    want_values, want_indices = topk_cpu.topk_sampled(want_acc, k)
    acc = residual.copy()
    values, indices = topk_cpu.fold_topk_sampled(acc, grad, keep, k)
    np.testing.assert_array_equal(indices, want_indices)
    np.testing.assert_array_equal(values.view(np.uint32), want_values.view(np.uint32))
    np.testing.assert_array_equal(acc.view(np.uint32), want_acc.view(np.uint32))


@pytest.mark.parametrize("parts", [1, 3])  # one thread, or parts as the parallel build splits
@pytest.mark.parametrize("keep", [True, False])
@pytest.mark.parametrize("ratio", [0.001, 0.01, 0.3, 1.0])
def test_fold_topk_sampled_is_fold_then_topk_sampled(vector, keep, ratio, parts, monkeypatch):
    monkeypatch.setattr(topk_cpu, "workers", lambda size: parts)
    k = max(1, int(np.ceil(ratio * vector.size)))
    _assert_same_topk(vector, _residual(vector.size), keep, k)


@pytest.mark.parametrize("case", ["overflow", "cut", "undershoot"])
def test_fold_topk_sampled_takes_the_fallbacks_as_topk_sampled(case, monkeypatch):
    """More candidates than a part has room for (a plateau: exact selection), more than 1.3k
    (every large entry in one part: cut to k), fewer than 0.8k (the sample sees only large
    entries: exact selection)."""
    monkeypatch.setattr(topk_cpu, "workers", lambda size: 2)
    n, k = 100_000, 500
    grad = np.random.default_rng(7).standard_normal(n).astype(np.float32)
    if case == "overflow":
        grad = np.ones(n, np.float32)
        grad[::7] = 2.0
    elif case == "cut":
        grad[: n // 2] *= 1e-3
    else:
        grad[::100] *= 50
    _assert_same_topk(grad, np.zeros(n, np.float32), True, k)


@pytest.mark.parametrize("size", [1237, PARALLEL_MIN + 3])  # serial and parallel builds
def test_fold_topk_sampled_reports_non_finite(size):
    grad = np.random.default_rng(2).standard_normal(size).astype(np.float32)
    grad[[0, size - 1]] = [np.inf, np.nan]
    assert topk_cpu.fold_topk_sampled(np.zeros(size, np.float32), grad, True, size // 100) is None
    grad[size - 1] = 1.0
    grad[5] = -np.inf  # outside the sample, which then sees only finite values
    assert topk_cpu.fold_topk_sampled(np.zeros(size, np.float32), grad, True, size // 100) is None


def test_parallel_build_matches_serial_build():
    n = PARALLEL_MIN + 17
    grad = np.random.default_rng(3).standard_normal(n).astype(np.float32)
    results = []
    for build in (topk_cpu._fold_take.serial, topk_cpu._fold_take.parallel):
        acc, values, indices = _residual(n), np.zeros(2 * 4000, np.float32), np.zeros(2 * 4000, np.int32)
        counts = np.zeros(2, np.int64)
        assert build(acc, grad, True, np.float32(2.6), values, indices, counts) == 0
        results.append((acc, values, indices, counts))
    for want, got in zip(*results):
        np.testing.assert_array_equal(got, want)


def _bits(arrays) -> list[np.ndarray]:
    return [np.atleast_1d(a).view(np.uint8) for a in arrays]


def _assert_same(fused, unfused, grad: np.ndarray, keep: bool) -> None:
    """``fused(acc, grad, keep)`` against ``fold`` then ``unfused(acc)``: the same arrays and
    residual, bit for bit; None, as the fold's count says, when ``grad`` is not finite."""
    residual = _residual(grad.size)
    want_acc = residual.copy()
    finite = compensate_cpu.fold(want_acc, grad, keep) == 0
    acc = residual.copy()
    got = fused(acc, grad, keep)
    if not finite:
        assert got is None
        return
    for g, w in zip(_bits(got), _bits(unfused(want_acc))):
        np.testing.assert_array_equal(g, w)
    np.testing.assert_array_equal(acc.view(np.uint32), want_acc.view(np.uint32))


def _with_non_finite(vector: np.ndarray) -> np.ndarray:
    bad = vector.copy()
    bad[bad.size // 2] = np.nan
    return bad


@pytest.mark.parametrize("finite", [True, False])
@pytest.mark.parametrize("keep", [True, False])
@pytest.mark.parametrize("bin_size", [1, 50, 500])
def test_adacomp_fold_select_is_fold_then_select(vector, keep, bin_size, finite):
    grad = vector if finite else _with_non_finite(vector)
    _assert_same(lambda acc, g, keep: adacomp_cpu.fold_select(acc, g, keep, bin_size),
                 lambda acc: adacomp_cpu.select(acc, grad, bin_size), grad, keep)


@pytest.mark.parametrize("finite", [True, False])
@pytest.mark.parametrize("keep", [True, False])
@pytest.mark.parametrize("groups, scaling", [(1, "means"), (1, "l1"), (7, "means")])
def test_onebit_fold_quantize_is_fold_then_quantize(vector, keep, groups, scaling, finite):
    grad = vector if finite else _with_non_finite(vector)
    _assert_same(lambda acc, g, keep: onebit_cpu.fold_quantize(acc, g, keep, groups, scaling),
                 lambda acc: onebit_cpu.quantize(acc, groups, scaling), grad, keep)


@pytest.mark.parametrize("method", ["adacomp", "onebit"])
def test_fused_parallel_builds_match_the_unfused_kernels(method):
    grad = np.random.default_rng(4).standard_normal(PARALLEL_MIN + 17).astype(np.float32)
    if method == "adacomp":
        fused = lambda acc, g, keep: adacomp_cpu.fold_select(acc, g, keep, 500)  # noqa: E731
        unfused = lambda acc: adacomp_cpu.select(acc, grad, 500)  # noqa: E731
    else:
        fused = lambda acc, g, keep: onebit_cpu.fold_quantize(acc, g, keep, 1, "means")  # noqa: E731
        unfused = lambda acc: onebit_cpu.quantize(acc, 1, "means")  # noqa: E731
    _assert_same(fused, unfused, grad, True)
