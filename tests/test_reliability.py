"""Ordinary training scripts that used to go wrong with hvd_compress (issue 10), each run on
real gloo workers: several optimizers, a shared compressor, frozen layers, hvd.join(), bf16 and
fp16 models, wrong compression= values, a checkpoint loaded on every rank from rank 0, and a
second synchronize() in one step. One launch per world size runs them all."""
import functools
import warnings

import pytest
import torch
from torch import nn

import hvd_compress as hc
from harness import parameters_digest, run_workers

SPECS = ["topk:ratio=0.01", "onebit", "onebit:communication=twophase", "adacomp"]


def _distributed(model: nn.Module, compression, lr: float = 0.1, prefix: str = ""):
    import horovod.torch as hvd

    named = [(prefix + name, p) for name, p in model.named_parameters()]
    return hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=lr),
                                    named_parameters=named, compression=compression)


def _batch(step: int, rank: int, features: int = 64) -> torch.Tensor:
    return torch.randn(8, features, generator=torch.Generator().manual_seed(100 * step + rank))


def _two_optimizers(spec: str) -> str:
    """Models A and B with an optimizer each. Step 0: rank 1 computes no loss through A
    (Horovod zero-fills A's gradients there). Later steps: the ranks run the two optimizers in
    crossing orders (rank 0: B.backward, A.backward, A.step, B.step; rank 1: A.backward, A.step,
    B.backward, B.step)."""
    import horovod.torch as hvd

    torch.manual_seed(0)
    models = {"A": nn.Linear(64, 64), "B": nn.Linear(64, 64)}
    optimizers = {k: _distributed(m, hc.from_spec(spec), prefix=f"{k}.") for k, m in models.items()}

    def backward(key, step):
        models[key](_batch(step, hvd.rank())).pow(2).mean().backward()

    for opt in optimizers.values():
        opt.zero_grad()
    backward("B", 0)
    if hvd.rank() == 0:
        backward("A", 0)
    for opt in optimizers.values():
        opt.step()
    for step in range(1, 4):
        for opt in optimizers.values():
            opt.zero_grad()
        if hvd.rank() == 0:
            backward("B", step), backward("A", step)
            optimizers["A"].step(), optimizers["B"].step()
        else:
            backward("A", step), optimizers["A"].step()
            backward("B", step), optimizers["B"].step()
    return parameters_digest(models["A"]) + parameters_digest(models["B"])


def _shared_compressor() -> str:
    compressor = hc.TopK(0.01)
    _distributed(nn.Linear(64, 64), compressor)
    try:
        _distributed(nn.Linear(64, 64), compressor)
        return "accepted"
    except ValueError as err:
        return str(err)


def _frozen_layer(spec: str) -> dict:
    """Trains 3 steps, freezes the weight, trains 5 more: the weight and its residual stay."""
    import horovod.torch as hvd

    torch.manual_seed(0)
    model = nn.Linear(128, 64)
    compressor = hc.from_spec(spec)
    optimizer = _distributed(model, compressor)

    def step(s):
        optimizer.zero_grad()
        model(_batch(s, hvd.rank(), 128)).pow(2).mean().backward()
        optimizer.step()

    for s in range(3):
        step(s)
    model.weight.requires_grad_(False)
    weight = model.weight.detach().clone()
    residuals = {k: v.clone() for k, v in compressor.memory.residuals().items()}
    for s in range(3, 8):
        step(s)
    after = compressor.memory.residuals()
    return {"weight_moved": int((model.weight != weight).sum()),
            "residuals_kept": all(torch.equal(after[k], v) for k, v in residuals.items()
                                  if k.startswith("weight")),
            "bias_trained": True}


def _join() -> dict:
    """Rank 1 runs out of data after 3 steps and calls hvd.join(); rank 0 has 5 steps."""
    import gc

    import horovod.torch as hvd

    found = {}
    torch.manual_seed(0)
    model = nn.Linear(64, 64)
    optimizer = _distributed(model, hc.TopK(0.01))
    steps = 5 if hvd.rank() == 0 else 3
    for s in range(steps):
        optimizer.zero_grad()
        model(_batch(s, hvd.rank())).pow(2).mean().backward()
        optimizer.step()
    try:
        hvd.join()
        found["compressed"] = "joined"
    except ValueError as err:
        found["compressed"] = str(err)
        for s in range(steps, 5):  # the fix the message suggests: as many steps on every rank
            optimizer.zero_grad()
            model(_batch(s, hvd.rank())).pow(2).mean().backward()
            optimizer.step()
    del model, optimizer
    gc.collect()
    # With only Horovod's own compression in use, join works as in plain Horovod.
    plain = nn.Linear(64, 64)
    optimizer = _distributed(plain, hvd.Compression.none)
    for s in range(5 if hvd.rank() == 0 else 3):
        optimizer.zero_grad()
        plain(_batch(s, hvd.rank())).pow(2).mean().backward()
        optimizer.step()
    found["plain"] = hvd.join()
    return found


def _low_precision(spec: str, dtype: torch.dtype) -> dict:
    """A whole model in bf16 or fp16, default options (its biases go dense)."""
    import horovod.torch as hvd
    import torch.nn.functional as F

    from models import LeNet5

    torch.manual_seed(0)
    model = LeNet5().to(dtype)
    optimizer = _distributed(model, hc.from_spec(spec), lr=0.05)
    for s in range(3):
        data = torch.Generator().manual_seed(10 * s + hvd.rank())
        x, y = torch.randn(8, 1, 28, 28, generator=data).to(dtype), torch.randint(0, 10, (8,), generator=data)
        optimizer.zero_grad()
        F.cross_entropy(model(x).float(), y).backward()
        optimizer.step()
    return {"finite": all(bool(p.isfinite().all()) for p in model.parameters()),
            "dtypes": sorted({str(p.grad.dtype) for p in model.parameters()}),
            "digest": parameters_digest(model.float())}


def _wrong_compression() -> dict:
    found = {}
    for label, value in {"class": hc.TopK, "string": "topk", "object": object()}.items():
        try:
            _distributed(nn.Linear(64, 64), value)
            found[label] = "accepted"
        except TypeError as err:
            found[label] = str(err)
    return found


def _checkpoint() -> dict:
    """Every rank loads rank 0's compressor state (rank 0 saves, all ranks load)."""
    import horovod.torch as hvd

    torch.manual_seed(0)
    model = nn.Linear(64, 64)
    compressor = hc.OneBit(communication="twophase")
    optimizer = _distributed(model, compressor)
    for s in range(2):
        optimizer.zero_grad()
        model(_batch(s, hvd.rank())).pow(2).mean().backward()
        optimizer.step()
    mine = compressor.state_dict()
    rank0 = hvd.broadcast_object(mine, root_rank=0, name="checkpoint")
    loaded = hc.OneBit(communication="twophase")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded.load_state_dict(rank0)
    resized = hc.OneBit(communication="twophase")
    resized.load_state_dict({**mine, "world_size": hvd.size() + 1})
    return {"saved": (mine["rank"], mine["world_size"]),
            "warnings": [str(w.message) for w in caught],
            "loaded": sorted(loaded.memory.residuals()),
            "same_as_saved": all(torch.equal(loaded.memory.residuals()[k], v)
                                 for k, v in mine["residuals"].items()) if caught == [] else None,
            "resized": sorted(resized.memory.residuals())}


def _second_synchronize(spec: str) -> dict:
    """``synchronize(); clip; step()`` without skip_synchronize(), against the correct pattern."""
    import horovod.torch as hvd

    found = {}
    for pattern in ("skip", "twice"):
        torch.manual_seed(0)
        model = nn.Linear(64, 64)
        compressor = hc.from_spec(spec)
        optimizer = _distributed(model, compressor)
        for s in range(3):
            optimizer.zero_grad()
            model(_batch(s, hvd.rank())).pow(2).mean().backward()
            optimizer.synchronize()
            nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # Horovod's own "training slowdown" warning
                if pattern == "skip":
                    with optimizer.skip_synchronize():
                        optimizer.step()
                else:
                    optimizer.step()
        found[pattern] = (parameters_digest(model), compressor.stats()["steps"])
    return found


def all_checks() -> dict:
    import os

    # A regression to a hang becomes an error: Horovod shuts down a collective stalled this long.
    os.environ["HOROVOD_STALL_CHECK_TIME_SECONDS"] = "10"
    os.environ["HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"] = "60"
    import horovod.torch as hvd

    hvd.init()
    torch.set_num_threads(1)
    return {"two_optimizers": {spec: _two_optimizers(spec) for spec in ["none", *SPECS]},
            "shared": _shared_compressor(),
            "frozen": {spec: _frozen_layer(spec) for spec in SPECS},
            "low_precision": {(spec, str(dtype)): _low_precision(spec, dtype)
                              for spec in SPECS for dtype in (torch.bfloat16, torch.float16)},
            "wrong": _wrong_compression(),
            "checkpoint": _checkpoint(),
            "second_synchronize": {spec: _second_synchronize(spec) for spec in SPECS},
            "join": _join()}


@functools.cache
def findings(num_proc: int) -> list[dict]:
    return run_workers(all_checks, num_proc)


@pytest.mark.parametrize("spec", ["none", *SPECS])
def test_two_optimizers_in_any_order_train_identically_on_every_rank(spec):
    assert len({rank["two_optimizers"][spec] for rank in findings(2)}) == 1


def test_a_compressor_serves_one_optimizer():
    for rank in findings(2):
        assert "already serves a DistributedOptimizer" in rank["shared"]
        assert "from_spec('topk:" in rank["shared"]


@pytest.mark.parametrize("spec", SPECS)
def test_frozen_layer_keeps_its_residual_and_does_not_move(spec):
    for rank in findings(2):
        assert rank["frozen"][spec]["weight_moved"] == 0
        assert rank["frozen"][spec]["residuals_kept"]


def test_join_is_refused_with_compressors_and_works_without():
    ranks = findings(2)
    assert "hvd.join() is not supported with hvd_compress" in ranks[1]["join"]["compressed"]
    assert "same number of steps" in ranks[1]["join"]["compressed"]
    for rank in ranks:
        assert rank["join"]["plain"] in (0, 1)


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("dtype", ["torch.bfloat16", "torch.float16"])
def test_low_precision_models_train_with_default_options(spec, dtype):
    ranks = findings(2)
    for rank in ranks:
        assert rank["low_precision"][spec, dtype]["finite"]
        assert rank["low_precision"][spec, dtype]["dtypes"] == [dtype]
    assert len({rank["low_precision"][spec, dtype]["digest"] for rank in ranks}) == 1


def test_wrong_compression_values_are_refused_at_construction():
    wrong = findings(2)[0]["wrong"]
    assert "got the class TopK: pass compression=hvd_compress.TopK()" in wrong["class"]
    assert "pass compression=hvd_compress.from_spec('topk')" in wrong["string"]
    assert "takes an hvd_compress compressor or one of Horovod's" in wrong["object"]


def test_checkpoint_of_another_rank_resets_residuals_with_a_warning():
    rank0, rank1 = findings(2)
    assert rank0["checkpoint"]["saved"] == (0, 2) and rank1["checkpoint"]["saved"] == (1, 2)
    assert rank0["checkpoint"]["warnings"] == [] and rank0["checkpoint"]["same_as_saved"]
    assert rank0["checkpoint"]["loaded"] == ["weight", "weight#server"]  # the bias goes dense
    assert len(rank1["checkpoint"]["warnings"]) == 1
    assert "holds rank 0's residuals and this is rank 1" in rank1["checkpoint"]["warnings"][0]
    assert rank1["checkpoint"]["loaded"] == []
    for rank in (rank0, rank1):  # another world size: server residuals dropped, own ones kept
        assert "weight" in rank["checkpoint"]["resized"]
        assert not any(k.endswith("#server") for k in rank["checkpoint"]["resized"])


@pytest.mark.parametrize("spec", SPECS)
def test_second_synchronize_does_not_compress_the_aggregate_again(spec):
    for rank in findings(2):
        assert rank["second_synchronize"][spec]["twice"] == rank["second_synchronize"][spec]["skip"]
