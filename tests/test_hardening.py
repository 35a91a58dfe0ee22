"""Failure behaviour on gloo workers: non-finite gradients (one NaN, and GradScaler's overflow),
odd gradients, ranks that disagree, checkpoint and resume, a compressor pickled into
``horovod.run``; every method of the catalogue where the scenario applies to it."""
import functools
import os

import pytest
import torch

import hvd_compress as hc
from harness import run_workers
from hvd_compress.methods import METHODS

SPECS = ["topk:ratio=0.01", "onebit", "onebit:communication=twophase", "adacomp"]
#: every method of the catalogue with its defaults, and the two-phase route where it applies
CATALOGUE = sorted(METHODS) + ["onebit:communication=twophase", "qsgd:communication=twophase"]


def _sgd(params, spec: str, lr: float, momentum: float = 0.0):
    """SGD as a script would build it; DGC takes the momentum itself (it refuses an optimizer
    with momentum)."""
    return torch.optim.SGD(params, lr=lr, momentum=0.0 if spec.startswith("dgc") else momentum)


def _optimizer(params: dict, compression):
    import horovod.torch as hvd

    return hvd.DistributedOptimizer(torch.optim.SGD(params.values(), lr=0.0),
                                    named_parameters=params.items(), compression=compression)


def _finite_state(compressor) -> bool:
    """Whether every residual and every tensor of the method's state is finite."""
    if not isinstance(compressor, hc.Compressor):  # Horovod's own: no state
        return True
    state = compressor.state_dict()
    tensors = [*state["residuals"].values()]
    tensors += [v for fields in state["states"].values() for v in fields.values()
                if isinstance(v, torch.Tensor)]
    return all(bool(t.isfinite().all()) for t in tensors)


def _non_finite(spec: str) -> dict:
    """Rank 1's gradient holds a NaN at step 0 only."""
    import horovod.torch as hvd

    w = torch.nn.Parameter(torch.zeros(50, 100))
    compressor = hc.from_spec(spec)
    optimizer = _optimizer({"w": w}, compressor)
    found = {}
    for step in range(3):
        g = torch.randn(50, 100, generator=torch.Generator().manual_seed(step))
        if step == 0 and hvd.rank() == 1:
            g[1, 23] = float("nan")
        optimizer.zero_grad()
        (w * g).sum().backward()
        optimizer.step()
        found[step] = {"all_nan": bool(w.grad.isnan().all()), "finite": bool(w.grad.isfinite().all())}
    found["state_finite"] = _finite_state(compressor)
    return found


def _overflow(spec: str) -> dict:
    """GradScaler's usual overflow: rank 0's loss times 1e38 once (step 2), as the issue's
    script did; 12 steps in all. The scale must halve once and training go on, every rank
    alike."""
    import horovod.torch as hvd
    import torch.nn.functional as F

    from harness import parameters_digest

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 10))
    compressor = hc.from_spec(spec)
    optimizer = hvd.DistributedOptimizer(_sgd(model.parameters(), spec, 0.01), compression=compressor,
                                         named_parameters=model.named_parameters())
    scaler = torch.amp.GradScaler("cpu", init_scale=65536.0)
    skipped = []
    for step in range(12):
        data = torch.Generator().manual_seed(100 * step + hvd.rank())
        x, y = torch.randn(16, 64, generator=data), torch.randint(0, 10, (16,), generator=data)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y) * (1e38 if step == 2 and hvd.rank() == 0 else 1.0)
        scaler.scale(loss).backward()
        optimizer.synchronize()
        scaler.unscale_(optimizer)
        scale = scaler.get_scale()
        with optimizer.skip_synchronize():
            scaler.step(optimizer)
        scaler.update()
        skipped.append(scaler.get_scale() < scale)
    return {"skipped": [i for i, s in enumerate(skipped) if s], "scale": scaler.get_scale(),
            "state_finite": _finite_state(compressor), "digest": parameters_digest(model)}


def _pickled(compressor) -> dict:
    """A compressor built outside the training function reaches it pickled (horovod.run)."""
    model = torch.nn.Linear(64, 64)
    optimizer = _optimizer(dict(model.named_parameters()), compressor)
    model(torch.ones(4, 64)).sum().backward()
    optimizer.step()
    return {"spec": compressor.spec(), "steps": compressor.stats()["steps"]}


def _odd_gradients() -> dict:
    """A 0-d, an fp64, an empty and a non-contiguous gradient next to a compressed one."""
    import horovod.torch as hvd

    params = {"scalar": torch.nn.Parameter(torch.zeros(())),
              "double": torch.nn.Parameter(torch.zeros(3000, dtype=torch.float64)),
              "empty": torch.nn.Parameter(torch.zeros(0, 4)),
              "matrix": torch.nn.Parameter(torch.zeros(60, 50))}
    optimizer = _optimizer(params, hc.TopK(0.01, min_numel=0))
    grads = {"scalar": torch.tensor(2.0 + hvd.rank()), "double": torch.ones(3000, dtype=torch.float64),
             "empty": torch.zeros(0, 4), "matrix": torch.randn(50, 60).t()}  # non-contiguous
    for name, p in params.items():
        p.grad = grads[name]
    optimizer.synchronize()
    with optimizer.skip_synchronize():
        optimizer.step()
    return {name: (tuple(p.grad.shape), str(p.grad.dtype), float(p.grad.float().sum()))
            for name, p in params.items()}


def _disagreement(case: str) -> str:
    import horovod.torch as hvd

    rank = hvd.rank()
    compression = {"ratio": hc.TopK(0.01 if rank == 0 else 0.02),
                   "none_vs_topk": hc.TopK() if rank == 0 else hvd.Compression.none}.get(case, hc.TopK())
    w = torch.nn.Parameter(torch.zeros(5000 if case != "shape" or rank == 0 else 5001))
    optimizer = _optimizer({f"{case}.w": w}, compression)
    try:
        (w * torch.ones_like(w)).sum().backward()
        optimizer.step()
        return "no error"
    except Exception as err:  # noqa: BLE001  (the test asserts on the message)
        return f"{type(err).__name__}: {err}"


def _resume_digest(spec: str, steps: int, interrupt: bool) -> str:
    """Trains LeNet-5 for ``steps`` steps; with ``interrupt``, rebuilds everything from a
    checkpoint taken half-way."""
    import copy

    import horovod.torch as hvd
    import torch.nn.functional as F

    from harness import parameters_digest
    from models import LeNet5

    def build(state=None):
        torch.manual_seed(0)
        model = LeNet5()
        optimizer = _sgd(model.parameters(), spec, lr=0.05, momentum=0.9)
        compressor = hc.from_spec(spec)
        optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                             compression=compressor)
        if state:  # into the wrapped optimizer: Horovod's wrapper starts from empty state
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            compressor.load_state_dict(state["compressor"])
        return model, optimizer, compressor

    model, optimizer, compressor = build()
    for step in range(steps):
        if interrupt and step == steps // 2:
            state = copy.deepcopy({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                                   "compressor": compressor.state_dict()})
            model, optimizer, compressor = build(state)
        data = torch.Generator().manual_seed(100 * step + hvd.rank())
        x, y = torch.randn(16, 1, 28, 28, generator=data), torch.randint(0, 10, (16,), generator=data)
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    return parameters_digest(model)


def all_checks(captured) -> dict:
    import horovod.torch as hvd

    hvd.init()
    torch.set_num_threads(1)
    return {"non_finite": {spec: _non_finite(spec) for spec in CATALOGUE},
            "overflow": {spec: _overflow(spec) for spec in ["none", *CATALOGUE]},
            "odd": _odd_gradients(),
            "disagreement": {case: _disagreement(case) for case in ("ratio", "none_vs_topk", "shape")},
            "resume": {spec: (_resume_digest(spec, 8, False), _resume_digest(spec, 8, True))
                       for spec in CATALOGUE},
            "pickled": _pickled(captured)}


@functools.cache
def findings() -> list[dict]:
    return run_workers(all_checks, 2, hc.TopK(0.01))


@pytest.mark.parametrize("spec", CATALOGUE)
def test_non_finite_gradients_reach_the_update_and_leave_no_poison(spec):
    for rank in findings():
        found = rank["non_finite"][spec]
        assert found[0]["all_nan"], "every rank sees the step's NaN"
        assert found[1]["finite"] and found[2]["finite"], "later steps are clean"
        assert found["state_finite"]


@pytest.mark.parametrize("spec", ["none", *CATALOGUE])
def test_one_overflow_under_grad_scaler_skips_one_step_only(spec):
    ranks = findings()
    for rank in ranks:
        found = rank["overflow"][spec]
        assert found["skipped"] == [2], found
        assert found["scale"] == 32768.0
        assert found["state_finite"]
    assert len({rank["overflow"][spec]["digest"] for rank in ranks}) == 1


def test_a_compressor_captured_by_the_training_function_is_pickled_to_the_workers():
    for rank in findings():
        assert rank["pickled"]["spec"].startswith("topk:")
        assert rank["pickled"]["steps"] == 1


def test_odd_gradients_take_the_dense_path_or_work():
    for rank in findings():
        odd = rank["odd"]
        assert odd["scalar"] == ((), "torch.float32", 2.5)
        assert odd["double"] == ((3000,), "torch.float64", 3000.0)
        assert odd["empty"][:2] == ((0, 4), "torch.float32")
        assert odd["matrix"][:2] == ((60, 50), "torch.float32")


@pytest.mark.parametrize("case, message", [
    ("ratio", "ranks disagree on compression=: rank 0 uses 'topk:.*ratio=0.01.*', rank 1 uses 'topk:.*ratio=0.02"),
    ("none_vs_topk", "ranks disagree on compression=: rank 0 uses 'topk:.*', rank 1 uses 'NoneCompressor'"),
    ("shape", r"ranks disagree on the model: .*shape.*\('shape.w', \(5000,\)"),
])
def test_ranks_that_disagree_get_a_clear_error_not_a_hang(case, message):
    import re

    for rank in findings():
        assert rank["disagreement"][case].startswith("ValueError"), rank["disagreement"][case]
        assert re.search(message, rank["disagreement"][case]), rank["disagreement"][case]


@pytest.mark.parametrize("spec", CATALOGUE)
def test_resume_from_checkpoint_is_bitwise_identical(spec):
    for rank in findings():
        uninterrupted, resumed = rank["resume"][spec]
        assert uninterrupted == resumed


def test_compressible_dtypes_and_layouts():
    c = hc.TopK(min_numel=0)
    assert c.compressible(torch.zeros(10))
    assert c.compressible(torch.zeros(10, dtype=torch.bfloat16))
    assert not c.compressible(torch.zeros(10, dtype=torch.int64))
    assert not c.compressible(torch.zeros(10, dtype=torch.complex64))
    assert not c.compressible(torch.zeros(10, dtype=torch.float64))
    assert not c.compressible(torch.zeros(10).to_sparse())
    assert not c.compressible(torch.zeros(0))


def test_state_dict_round_trip_and_mismatch():
    c = hc.TopK()
    c.memory.compensate("w", torch.ones(10))
    state = c.state_dict()
    d = hc.TopK()
    d.load_state_dict(state)
    assert torch.equal(d.memory.residuals()["w"], torch.ones(10))
    with pytest.raises(ValueError, match="state_dict is for"):
        hc.TopK(0.5).load_state_dict(state)


def test_elastic_state_commits_restores_and_resets_residuals():
    """hvd.elastic.TorchState picks the compressor up through our handler, as it does models
    and optimizers (in-process: commit, rollback and the policy at a reset; tests/test_elastic.py
    changes the world size of a live job)."""
    import horovod.torch as hvd

    from hvd_compress import horovod_hook
    from hvd_compress.elastic import CompressorStateHandler

    compressor = hc.OneBit(communication="twophase")
    compressor.memory.compensate("w", torch.ones(10))
    compressor.memory.compensate("w#server", torch.ones(5))
    state = hvd.elastic.TorchState(compressor=compressor, step=0)
    assert isinstance(state._handlers["compressor"], CompressorStateHandler)
    state.save()  # commit() without its check for host changes, which needs hvd.init()
    compressor.memory.compensate("w", torch.ones(10))  # a step that is then rolled back
    state.restore()
    assert torch.equal(compressor.memory.residuals()["w"], torch.ones(10))
    world = horovod_hook._world
    state.on_reset()  # the world changed: own residuals kept, server residuals dropped...
    assert sorted(compressor.memory.residuals()) == ["w"]
    assert horovod_hook._world == world + 1  # ...and the agreement check re-armed


SOAK_STEPS = int(os.environ.get("HVD_COMPRESS_SOAK_STEPS", "300"))  # 2000 for the full soak


def _kernel_specializations() -> int:
    """Compiled signatures across all CPU kernels (serial and parallel builds)."""
    import importlib

    count = 0
    for name in ("topk_cpu", "onebit_cpu", "adacomp_cpu"):
        module = importlib.import_module(f"hvd_compress.kernels.{name}")
        for obj in vars(module).values():
            for dispatcher in (obj, getattr(obj, "serial", None), getattr(obj, "parallel", None)):
                count += len(getattr(dispatcher, "signatures", ()))
    return count


def _soak(spec: str, steps: int) -> dict:
    """LeNet-5 for ``steps`` steps; resident memory, residuals and kernel specializations
    after a quarter of the run (warm) and at the end."""
    import horovod.torch as hvd
    import psutil
    import torch.nn.functional as F

    from models import LeNet5

    torch.manual_seed(0)
    model = LeNet5()
    compressor = hc.from_spec(spec)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                         named_parameters=model.named_parameters(), compression=compressor)
    marks = {}
    for step in range(steps):
        data = torch.Generator().manual_seed(step % 50)
        x, y = torch.randn(16, 1, 28, 28, generator=data), torch.randint(0, 10, (16,), generator=data)
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
        if step in (steps // 4, steps - 1):
            marks["warm" if step < steps - 1 else "end"] = {
                "rss": psutil.Process().memory_info().rss, "residuals": len(compressor.memory.residuals()),
                "specializations": _kernel_specializations()}
    return marks


def soak_checks(steps: int) -> dict:
    import horovod.torch as hvd

    hvd.init()
    torch.set_num_threads(1)
    return {spec: _soak(spec, steps) for spec in SPECS}


@functools.cache
def soak_findings() -> list[dict]:
    return run_workers(soak_checks, 2, SOAK_STEPS)


@pytest.mark.parametrize("spec", SPECS)
def test_long_runs_stay_bounded(spec):
    for rank in soak_findings():
        warm, end = rank[spec]["warm"], rank[spec]["end"]
        assert end["rss"] <= 1.05 * warm["rss"], (warm["rss"], end["rss"])
        assert end["residuals"] == warm["residuals"] <= 6  # 3 compressed layers (+ server parts)
        assert end["specializations"] == warm["specializations"]
