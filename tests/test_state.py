"""A compressor's state in one process: keyed by parameter name, saved whole by state_dict(),
copied and pickled with it; DGC's refusals and its ratio=1 behaviour; what importing
hvd_compress costs plain Horovod's join. (Across ranks, in Horovod: tests/test_hardening.py.)"""
import copy
import pickle

import pytest
import torch

import hvd_compress as hc
from hvd_compress.methods import METHODS
from hvd_compress.state import piece_key

#: the methods that encode (PowerSGD's factors travel by allreduce: communication/lowrank.py)
ENCODING = sorted(name for name in METHODS if name != "powersgd")
SHAPE = torch.Size((40, 100))


def _steps(compressor, steps: range, pieces=((0, 4000),)) -> list[torch.Tensor]:
    """Payloads of ``steps`` encodes of parameter "w" (each step's gradient seeded by its
    number), piece by piece as the two-phase route would cut it."""
    payloads = []
    for step in steps:
        grad = torch.randn(SHAPE, generator=torch.Generator().manual_seed(step)).reshape(-1)
        acc = compressor.memory.buffer("w", grad)
        for lo, hi in pieces:
            payloads.append(compressor.fold_encode(acc[lo:hi], grad[lo:hi], SHAPE, True,
                                                   piece_key("w", lo, hi, 4000)))
    return payloads


def _spec(name: str) -> str:
    return "qsgd:seed=3" if name == "qsgd" else name  # a seeded quantizer counts its encodes


@pytest.mark.parametrize("name", ENCODING)
@pytest.mark.parametrize("pieces", [((0, 4000),), ((0, 2000), (2000, 4000))], ids=["whole", "chunks"])
def test_a_resume_from_state_dict_encodes_bitwise_as_if_uninterrupted(name, pieces):
    uninterrupted = hc.from_spec(_spec(name))
    expected = _steps(uninterrupted, range(6), pieces)
    first = hc.from_spec(_spec(name))
    got = _steps(first, range(3), pieces)
    saved = copy.deepcopy(first.state_dict())
    resumed = hc.from_spec(_spec(name))
    resumed.load_state_dict(saved)
    got += _steps(resumed, range(3, 6), pieces)
    assert all(torch.equal(a, b) for a, b in zip(expected, got))


@pytest.mark.parametrize("name", ENCODING)
def test_compressors_copy_and_pickle_with_their_state(name):
    original = hc.from_spec(_spec(name))
    _steps(original, range(2))
    for clone in (copy.deepcopy(original), pickle.loads(pickle.dumps(original))):
        assert clone.spec() == original.spec()
        assert all(torch.equal(a, b) for a, b in zip(_steps(clone, range(2, 4)),
                                                       _steps(copy.deepcopy(original), range(2, 4))))
        clone.serve(["w"])  # a copy serves no optimizer yet, and its lock works


def test_powersgd_state_dict_holds_the_warm_start_and_the_step_count():
    c = hc.PowerSGD(rank=2, start_step=1)
    assert not c.compressing("w") and c.compressing("w")
    q = torch.randn(100, 2)
    c.keep_q("w", q)
    resumed = hc.PowerSGD(rank=2, start_step=1)
    resumed.load_state_dict(c.state_dict())
    assert torch.equal(resumed.q("w", 100, torch.device("cpu")), q)
    assert resumed.compressing("w")
    assert resumed.state_dict()["states"]["w"]["steps"] == 3


def test_another_ranks_checkpoint_keeps_shared_state_and_drops_local_state(monkeypatch):
    from hvd_compress import compressor as module

    c = hc.DGC(ratio=0.05)
    _steps(c, range(2))
    saved = c.state_dict()
    assert sorted(saved["states"]["w"]) == ["steps", "u"]
    monkeypatch.setattr(module, "position", lambda: (1, 2))
    other = hc.DGC(ratio=0.05)
    with pytest.warns(UserWarning, match="holds rank None's residuals|residuals are per rank"):
        other.load_state_dict({**saved, "rank": 0, "world_size": 2})
    assert other.memory.residuals() == {}
    assert other.state_dict()["states"] == {"w": {"steps": 2}}  # the velocity is rank 0's own


def test_another_world_size_drops_the_two_phase_partition():
    from hvd_compress import compressor as module

    c = hc.from_spec("randomk:communication=twophase")
    _steps(c, range(2), ((0, 2000), (2000, 4000)))
    c.memory.buffer("w#server", torch.zeros(2000))
    saved = c.state_dict()
    original = module.position
    module.position = lambda: (0, 3)
    try:
        other = hc.from_spec("randomk:communication=twophase")
        other.load_state_dict({**saved, "rank": 0, "world_size": 2})
    finally:
        module.position = original
    assert sorted(other.memory.residuals()) == ["w"]
    assert other.state_dict()["states"] == {}


def test_dgc_refuses_an_optimizer_with_momentum_and_says_the_fix():
    import horovod.torch as hvd

    model = torch.nn.Linear(40, 40)
    with pytest.raises(ValueError, match=r"momentum=0\.9 too.*momentum=0 and give the momentum to "
                                         r"DGC: hvd_compress.DGC\(ratio=0.001, momentum=0.9\)"):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                 named_parameters=model.named_parameters(), compression=hc.DGC())


def test_dgc_at_ratio_one_sends_everything_and_is_plain_sgd():
    c = hc.DGC(ratio=1.0, momentum=0.9)
    for step in range(3):
        grad = torch.randn(2000, generator=torch.Generator().manual_seed(step))
        acc = c.memory.buffer("w", grad)
        out = torch.zeros(2000)
        c.decode_add(c.fold_encode(acc, grad, grad.shape, True, "w"), out, grad.shape)
        assert torch.equal(out, grad)  # the gradient itself: no momentum builds up
        assert not acc.any()


def test_join_collects_nothing_without_compressed_optimizers(monkeypatch):
    import gc

    from hvd_compress import horovod_hook

    collections = []
    monkeypatch.setattr(gc, "collect", lambda *a: collections.append(a) or 0)
    monkeypatch.setattr(horovod_hook, "_horovod_join", lambda *a, **k: 0)
    monkeypatch.setattr(horovod_hook, "_compressed", type(horovod_hook._compressed)())
    assert horovod_hook._join() == 0
    assert collections == []
