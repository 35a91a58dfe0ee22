"""hvd_compress.ddp: every method as a torch DDP communication hook, on gloo workers over
loopback (2, and 3 for the catalogue), with Horovod made unimportable in the workers (a DDP user
needs none).

One launch per world size runs every check and returns each rank's findings, which the tests
below assert on. The workers import nothing of hvd_compress before they block Horovod, so this
module's top level imports neither. The references are test_horovod's (this process imports it,
and with it Horovod).
"""
import copy
import functools
import os
import socket
import sys
import tempfile
import time

import numpy as np
import pytest
import torch

import references

#: the world sizes launched: every check at 2, the catalogue's aggregates again at 3 (two-phase's
#: chunks and alltoall splits uneven)
WORLDS = (2, 3)
STEPS = 5
#: the design-card methods' configurations the numpy references below rebuild
NUMPY_SPECS = {"topk": "topk:ratio=0.05,selection=exact,communication=allgather",
               "onebit": "onebit", "adacomp": "adacomp"}
RESUMED = ["topk:ratio=0.01", "dgc:ratio=0.05", "powersgd:rank=1,start_step=2",
           "onebit:communication=twophase", "qsgd:error_feedback=true"]
NON_FINITE = ["topk:ratio=0.01", "onebit:communication=twophase", "powersgd:rank=2", "signsgd",
              "adacomp"]
#: trained again with DDP's gradient_as_bucket_view, and in bfloat16
VARIANTS = ["topk:ratio=0.01", "onebit:communication=twophase", "powersgd:rank=2", "qsgd"]


# --- in the workers ----------------------------------------------------------------------

class _Params(torch.nn.Module):
    """One parameter per name of ``shapes``; the loss is sum(param * given gradient), so each
    parameter's gradient is the one given, and a parameter not in the step's inputs gets none."""

    def __init__(self, shapes: dict) -> None:
        super().__init__()
        for name, shape in shapes.items():
            self.register_parameter(name, torch.nn.Parameter(torch.zeros(shape)))

    def forward(self, grads: dict) -> torch.Tensor:
        return sum((getattr(self, name) * g).sum() for name, g in grads.items())


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                               torch.nn.ReLU(), torch.nn.Linear(64, 10))


def _ddp(module: torch.nn.Module, **kwargs):
    from torch.nn.parallel import DistributedDataParallel

    # small buckets: several per step after DDP's first-step rebuild, which runs one
    return DistributedDataParallel(module, bucket_cap_mb=0.01, **kwargs)


def _aggregates(spec: str, shapes: dict, inputs: list, nan_at=None) -> tuple[list, object]:
    """The gradient DDP leaves on each parameter after each step (None: no rank had one)."""
    import hvd_compress as hc

    model = _ddp(_Params(shapes), find_unused_parameters=True)
    state = hc.ddp.register(model, spec)
    got = []
    for step, grads in enumerate(inputs):
        model.zero_grad(set_to_none=True)
        grads = {n: g for n, g in grads.items() if g is not None}
        if nan_at == step:
            grads["w"] = grads["w"].clone()
            grads["w"][3, 5] = float("nan")
        model(grads).backward()
        got.append({n: None if p.grad is None else p.grad.clone() for n, p in model.module.named_parameters()})
        if nan_at == step:
            got[-1]["residual"] = state.compressor.memory.residuals()["w"].clone()
    return got, state


def _train(spec: str, steps: int, rank: int, resume_at: int | None = None,
           dtype: torch.dtype = torch.float32, **ddp_options) -> bytes:
    """Trains the MLP on rank-specific data; with ``resume_at``, rebuilds model, optimizer and
    hook from their state dicts at that step. Returns the parameters' bytes."""
    import torch.nn.functional as F

    import hvd_compress as hc

    def build(saved=None):
        model = _ddp(_mlp().to(dtype), **ddp_options)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0 if spec.startswith("dgc") else 0.9)
        state = hc.ddp.register(model, spec, optimizer=optimizer)
        if saved:
            model.load_state_dict(saved[0])
            optimizer.load_state_dict(saved[1])
            state.load_state_dict(saved[2])
        return model, optimizer, state

    model, optimizer, state = build()
    data = torch.Generator().manual_seed(rank)
    for step in range(steps):
        if step == resume_at:
            saved = copy.deepcopy((model.state_dict(), optimizer.state_dict(), state.state_dict()))
            model, optimizer, state = build(saved)
        x, y = torch.randn(16, 32, generator=data).to(dtype), torch.randint(0, 10, (16,), generator=data)
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    return b"".join(p.detach().float().numpy().tobytes() for p in model.module.parameters())


def _refusals() -> dict:
    import hvd_compress as hc

    found = {}
    model = _ddp(_mlp())
    for label, args in {"ratio": (model, "topk:ratio=2"), "unknown": (model, "nosuch"),
                        "option": (model, "topk:nope=1"), "class": (model, hc.TopK),
                        "not_ddp": (_mlp(), "topk"),
                        "dgc_momentum": (model, "dgc", None,
                                         torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))}.items():
        try:
            hc.ddp.register(*args)
            found[label] = "accepted"
        except (ValueError, TypeError) as err:
            found[label] = f"{type(err).__name__}: {err}"
    hc.ddp.register(model, "topk")  # nothing of the refused ones was left registered
    found["then_registered"] = True
    return found


def _disagreements(rank: int) -> dict:
    import hvd_compress as hc

    found = {}
    cases = {"spec": ({"w": (64, 100)}, f"topk:ratio={0.01 * (rank + 1)}"),
             "model": ({"w" if rank == 0 else "w2": (64, 100)}, "topk:ratio=0.01")}
    for case, (shapes, spec) in cases.items():
        try:
            hc.ddp.register(_ddp(_Params(shapes)), spec)
            found[case] = "accepted"
        except ValueError as err:
            found[case] = str(err)
    return found


def _worker(rank: int, world: int, port: int, specs: list, inputs: list, out: str) -> None:
    sys.modules["horovod"] = None  # no Horovod in this process: the DDP door needs none
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.set_num_threads(1)
    shapes = {name: tuple(g.shape) for name, g in inputs[0][0].items()}
    mine = [step[rank] for step in inputs]
    found = {"aggregates": {}, "params": {}, "resumed": {}, "non_finite": {}, "variants": {}}
    for spec in specs:
        found["aggregates"][spec] = _aggregates(spec, shapes, mine)[0]
        if world == WORLDS[0]:
            found["params"][spec] = _train(spec, 4, rank)
    found["horovod_modules"] = sorted(m for m, v in sys.modules.items() if m.startswith("horovod") and v)
    if world != WORLDS[0]:
        torch.save(found, os.path.join(out, f"rank{rank}.pt"))
        dist.destroy_process_group()
        return
    for spec in VARIANTS:
        found["variants"][spec] = {"view": _train(spec, 4, rank, gradient_as_bucket_view=True),
                                   "bf16": _train(spec, 4, rank, dtype=torch.bfloat16)}
    for spec in RESUMED:
        found["resumed"][spec] = (_train(spec, 6, rank), _train(spec, 6, rank, resume_at=3))
    full = [{n: torch.randn(s, generator=torch.Generator().manual_seed(10 * t + rank)) for n, s in shapes.items()}
            for t in range(3)]
    for spec in NON_FINITE:
        found["non_finite"][spec] = _aggregates(spec, shapes, full, nan_at=1)[0]
    found["refusals"] = _refusals()
    found["disagreements"] = _disagreements(rank)
    torch.save(found, os.path.join(out, f"rank{rank}.pt"))
    dist.destroy_process_group()


# --- in pytest ---------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _inputs(world: int) -> list:
    """inputs[step][rank][name]: each rank's gradient, test_horovod's, or None: none that step,
    on one rank or (step 3, "v") on every rank."""
    from test_horovod import SHAPES, gradient

    skip = {(1, 0, "v"), (2, 1, "w"), (2, 0, "b")} | {(3, rank, "v") for rank in range(world)}
    return [[{n: None if (s, r, n) in skip else gradient(s, r, n) for n in SHAPES} for r in range(world)]
            for s in range(STEPS)]


@functools.cache
def _specs() -> list:
    import catalogue

    return catalogue.specs() + [NUMPY_SPECS["topk"]]


@functools.cache
def findings(world: int = WORLDS[0]) -> list[dict]:
    """Each rank's findings from one launch of ``world`` workers (killed after 300 s: a hang
    fails the tests instead of stalling the suite)."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as out:
        context = mp.start_processes(_worker, args=(world, _free_port(), _specs(), _inputs(world), out),
                                     nprocs=world, join=False, start_method="spawn")
        deadline = time.monotonic() + 300
        try:
            while not context.join(timeout=max(0.0, deadline - time.monotonic())):
                if time.monotonic() >= deadline:
                    raise TimeoutError("the DDP workers ran past 300 s (a hang?)")
        finally:
            for process in context.processes:
                if process.is_alive():
                    process.kill()
        return [torch.load(os.path.join(out, f"rank{r}.pt"), weights_only=False) for r in range(world)]


def _max_error(got: list, want: list) -> float:
    return max(float(((g[n] if g[n] is not None else torch.zeros_like(w[n])) - w[n]).abs().max())
               for g, w in zip(got, want) for n in w)


@pytest.mark.parametrize("world", WORLDS)
def test_every_method_matches_the_single_process_reference(world):
    """test_horovod's reference: one compressor per simulated rank, payloads summed in rank
    order; parameters without a gradient on some or all ranks included."""
    from test_horovod import reference

    inputs = _inputs(world)
    per_rank = [[inputs[s][r] for s in range(STEPS)] for r in range(world)]
    for spec in _specs():
        want = reference(spec, per_rank, average=True)
        for rank in findings(world):
            # PowerSGD's factors are summed by gloo's allreduce, in another order than the
            # reference's, and orthogonalized after: equal up to rounding
            tolerance = 1e-4 if spec.startswith("powersgd") else 1e-6
            assert _max_error(rank["aggregates"][spec], want) <= tolerance, spec


@pytest.mark.parametrize("world", WORLDS)
def test_ranks_end_with_bitwise_identical_gradients_and_parameters(world):
    first, *others = findings(world)
    for other in others:
        for spec in _specs():
            assert first["params"].get(spec) == other["params"].get(spec), spec  # trained at 2
            for a, b in zip(first["aggregates"][spec], other["aggregates"][spec]):
                assert all((a[n] is None and b[n] is None) or torch.equal(a[n], b[n]) for n in a), spec


def _numpy_aggregates(method: str, compressor, inputs: list, shapes: dict) -> list[dict]:
    """The aggregate of ``method`` at each step from tests/references.py alone: per rank a
    residual per parameter, plain numpy encode and decode, the mean over ranks."""
    world = len(inputs[0])
    residuals = [{} for _ in range(world)]
    steps = []
    for grads in inputs:
        out = {}
        for name, shape in shapes.items():
            n = shape.numel()
            present = [(r, g[name].numpy().reshape(-1)) for r, g in enumerate(grads) if g[name] is not None]
            if n < compressor.min_numel:  # DDP's mean, dense
                out[name] = sum(g for _, g in present) / np.float32(world)
                continue
            total = np.zeros(n, np.float32)
            for r, g in present:
                acc = residuals[r].get(name, np.zeros(n, np.float32)) + g
                if method == "topk":
                    values, indices, residuals[r][name] = references.topk_exact(acc, compressor.k(n))
                    references.scatter_add(values, indices, total)
                elif method == "onebit":
                    low, high, bits, residuals[r][name] = references.onebit(acc, 1, "means")
                    total += references.onebit_decode(bits, low, high, n)
                else:
                    scale, codes, residuals[r][name] = references.adacomp(acc, g, compressor.bin_for(shape))
                    total += references.adacomp_decode(scale, codes, n)
            out[name] = total / np.float32(world)
        steps.append(out)
    return steps


def test_topk_onebit_adacomp_match_numpy_references():
    import hvd_compress as hc

    inputs = _inputs(WORLDS[0])
    shapes = {n: g.shape for n, g in inputs[0][1].items()}
    for method, spec in NUMPY_SPECS.items():
        want = _numpy_aggregates(method, hc.from_spec(spec), inputs, shapes)
        for rank in findings():
            for step, (got, expected) in enumerate(zip(rank["aggregates"][spec], want)):
                for name, value in expected.items():
                    g = got[name].numpy().reshape(-1) if got[name] is not None else np.zeros(value.size)
                    np.testing.assert_allclose(g, value, rtol=1e-5, atol=1e-6,
                                               err_msg=f"{spec} step {step} {name}")


def test_gradients_as_bucket_views_and_bfloat16_models():
    """DDP's gradient_as_bucket_view gives the same bits; a bfloat16 model (residuals fp32, the
    dense allreduce in fp32) trains with ranks identical."""
    first, second = findings()
    for spec in VARIANTS:
        assert first["variants"][spec]["view"] == first["params"][spec], spec
        assert first["variants"][spec]["bf16"] == second["variants"][spec]["bf16"], spec


def test_checkpoint_resume_continues_bitwise():
    for rank in findings():
        for spec in RESUMED:
            straight, resumed = rank["resumed"][spec]
            assert straight == resumed, spec


def test_non_finite_gradient_gives_nan_for_that_tensor_and_step_and_clears_the_residual():
    for r, rank in enumerate(findings()):
        for spec in NON_FINITE:
            before, poisoned, after = rank["non_finite"][spec]
            assert all(torch.isfinite(g).all() for g in before.values() if g is not None), spec
            assert torch.isnan(poisoned["w"]).all(), spec
            assert torch.isfinite(poisoned["v"]).all() and torch.isfinite(poisoned["b"]).all(), spec
            assert all(torch.isfinite(g).all() for g in after.values()), spec
            if r == 1:  # the rank whose gradient held the NaN
                assert not poisoned["residual"].any(), spec
    first, second = findings()
    for spec in NON_FINITE:
        after = first["non_finite"][spec][2], second["non_finite"][spec][2]
        assert all(torch.equal(after[0][n], after[1][n]) for n in after[0]), spec


def test_bad_specs_and_wrong_arguments_are_refused_at_registration():
    refusals = findings()[0]["refusals"]
    assert refusals["ratio"].startswith("ValueError: ratio must be")
    assert refusals["unknown"].startswith("ValueError: unknown compressor 'nosuch'")
    assert refusals["option"].startswith("ValueError: unknown option 'nope'")
    assert refusals["class"].startswith("TypeError: pass a compressor instance")
    assert refusals["not_ddp"].startswith("TypeError: hvd_compress.ddp.register takes a DistributedDataParallel")
    assert "DGC applies its own momentum" in refusals["dgc_momentum"]
    assert refusals["then_registered"]


def test_disagreeing_ranks_fail_at_registration_with_a_clear_error():
    for rank in findings():
        assert rank["disagreements"]["spec"].startswith(
            "hvd_compress: ranks disagree on compression=: rank 0 uses 'topk:"), rank["disagreements"]
        assert rank["disagreements"]["model"].startswith(
            "hvd_compress: ranks disagree on the model"), rank["disagreements"]


@pytest.mark.parametrize("world", WORLDS)
def test_the_ddp_door_runs_without_horovod(world):
    for rank in findings(world):
        assert rank["horovod_modules"] == []


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
