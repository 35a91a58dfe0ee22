"""The cost model's formulas and the routes ``communication="auto"`` takes from them."""
import pytest
import torch

import hvd_compress as hc
from hvd_compress.communication import cost, fusion, route


@pytest.fixture(autouse=True)
def default_link(monkeypatch):
    """The routes of the default link rate (conftest.py sets a slow one for the other tests)."""
    monkeypatch.delenv("HVD_COMPRESS_LINK_GBIT")


def test_ring_allreduce_sends_twice_its_share():
    assert cost.dense(4000, 4) == cost.Cost(6000, fused=(("allreduce", 6),))


def test_allgather_grows_with_p_and_twophase_does_not():
    payload = 80_000
    for p in (2, 8, 64, 1024):
        assert cost.allgather(payload, p).bytes == (p - 1) * cost.framed(payload)
        assert cost.twophase(payload, payload / p, p).bytes < 2 * (payload + 2 * p * cost.framed(0))


def test_fused_rounds_are_paid_once_and_unfused_ones_per_tensor():
    link = cost.Link(gbit=8, latency_s=1e-3, overhead_s=1e-2)
    one = cost.twophase(1000, 1000 / 4, 4)
    step = one + one
    assert (step.collectives, step.rounds) == (2, 6)
    assert dict(step.fused) == {"second round": 3}
    # two alltoalls and one fused second round: 3 collectives, 6 + 3 rounds
    assert link.seconds(step) == pytest.approx(3e-2 + 9e-3 + step.bytes / 1e9)
    assert link.marginal_seconds(one) == pytest.approx(1e-2 + 3e-3 + one.bytes / 1e9)


def test_powersgd_sends_its_factors_twice_over():
    assert cost.powersgd(512, 4608, 4, 2).bytes == pytest.approx(4 * 4 * (512 + 4608))


def _route(spec: str, shape: tuple, ranks: int) -> str:
    return route.choose(hc.from_spec(spec), torch.zeros(shape), ranks)


def test_auto_takes_allgather_at_two_ranks():
    for spec in ("topk:ratio=0.01", "onebit", "adacomp"):
        assert _route(spec, (4096, 4096), 2) == "allgather"


def test_auto_takes_twophase_for_large_tensors_on_many_ranks():
    for spec in ("topk:ratio=0.01", "onebit", "adacomp"):
        assert _route(spec, (4096, 4096), 8) == "twophase"


def _plan(spec: str, shapes: list[tuple], ranks: int) -> list[str]:
    tensors = [(str(i), torch.Size(shape), 4) for i, shape in enumerate(shapes)]
    routes = route.plan(hc.from_spec(spec), tensors, ranks)
    return [routes[str(i)] for i in range(len(shapes))]


def test_the_compressed_paths_cpu_is_part_of_the_choice():
    # 1,600 elements cross a 1 Gbit/s link dense in less time than the compressed path's CPU
    assert _route("topk:ratio=0.01", (16, 100), 2) == "dense"
    # ... not on a slow link
    assert _route("topk:ratio=0.01,link_gbit=0.01", (16, 100), 2) == "allgather"
    # 6,400 elements on 8 ranks: two-phase's 2p + 3 encode and decode calls cost more than the
    # bytes it saves; nor do the bytes saved pay for an allgather collective of their own
    assert _route("topk:ratio=0.01", (64, 100), 8) == "dense"
    # on a fast link nothing is worth compressing
    assert set(_plan("onebit:link_gbit=100", [(512, 4608)] * 8, 8)) == {"dense"}


def test_the_second_round_is_paid_once_a_step():
    # 3M elements: at p=3 two-phase saves a third of a payload, less than its CPU and its round
    # after the backward pass cost; at p=4 half a payload, more; on a 10 Gbit/s link the bytes
    # saved are worth less than two-phase's CPU
    assert set(_plan("topk:ratio=0.01", [(3 * 2 ** 20,)] * 8, 3)) == {"allgather"}
    assert set(_plan("topk:ratio=0.01", [(3 * 2 ** 20,)] * 8, 4)) == {"twophase"}
    assert set(_plan("topk:ratio=0.01,link_gbit=10", [(3 * 2 ** 20,)] * 8, 4)) == {"allgather"}
    # LeNet-5's layers (a few thousand to 48,000 elements) never pay for it
    lenet = [(16, 6, 5, 5), (120, 400), (84, 120)]
    for p in (4, 8, 64):
        assert "twophase" not in _plan("topk:ratio=0.01", lenet, p)
    # a tensor that cannot give every rank a chunk stays off two-phase
    assert _route("topk:ratio=0.01,link_gbit=0.01", (50,), 8) != "twophase"
    assert _route("topk:ratio=0.01,link_gbit=0.0001", (50,), 8) == "allgather"


def test_buckets_follow_the_backward_pass_up_to_their_cap():
    parameters = [(name, torch.zeros(numel)) for name, numel in
                  [("a", 10), ("b", 300), ("small", 2), ("c", 300), ("d", 700), ("e", 100)]]
    buckets = fusion.plan(parameters, lambda name: name != "small", cap=4 * 600)
    # reverse registration order, at most 600 elements (2,400 bytes) each, a parameter larger
    # than the cap alone, the parameters two-phase does not send left out
    assert buckets == [["e"], ["d"], ["c", "b"], ["a"]]


def test_auto_goes_dense_where_compressing_saves_nothing():
    assert _route("topk:ratio=0.6", (1000, 1000), 2) == "dense"


def test_a_slower_link_moves_the_crossover_to_smaller_tensors():
    fast = [n for n in (2 ** e for e in range(12, 26))
            if _route("topk:ratio=0.01,link_gbit=10", (n,), 8) == "twophase"]
    slow = [n for n in (2 ** e for e in range(12, 26))
            if _route("topk:ratio=0.01,link_gbit=0.1", (n,), 8) == "twophase"]
    assert slow and fast and min(slow) < min(fast)


def test_forced_routes_are_kept_unless_the_tensor_cannot_be_split():
    assert _route("onebit:communication=twophase", (4096, 4096), 2) == "twophase"
    assert _route("onebit:communication=twophase", (12,), 4) == "allgather"
    assert _route("topk:communication=allgather", (4096, 4096), 64) == "allgather"
    assert _route("topk:communication=dense", (4096, 4096), 2) == "dense"


def test_expected_bytes_match_the_encoders():
    grad = torch.randn(300, 500, generator=torch.Generator().manual_seed(0))
    for spec in ("topk:ratio=0.01,selection=exact", "onebit", "onebit:granularity=column"):
        c = hc.from_spec(spec)
        acc = c.memory.compensate("w", grad)
        assert c.encode(acc, grad.reshape(-1), grad.shape).numel() == c.expected_bytes(grad.numel(), grad.shape)


def test_the_environment_sets_the_default_link_rate(monkeypatch):
    monkeypatch.setenv("HVD_COMPRESS_LINK_GBIT", "100")
    assert hc.TopK().link_gbit == 100.0 and hc.TopK(link_gbit=2).link_gbit == 2
    assert "link_gbit=100.0" in hc.TopK().spec()
    monkeypatch.setenv("HVD_COMPRESS_LINK_GBIT", "fast")
    with pytest.raises(ValueError, match="HVD_COMPRESS_LINK_GBIT"):
        hc.TopK()
