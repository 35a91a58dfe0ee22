"""The hierarchical route (communication/hierarchical.py) on two nodes of two workers, as
Horovod's launcher sees them: every method that takes it against a single-process reference,
ranks bitwise identical, route switches that keep error feedback exact; and the layouts,
costs and plans that decide when it runs."""
import functools
import os

import pytest
import torch

import catalogue
import hvd_compress as hc
from harness import run_workers
from hvd_compress.communication import cost, route, topology
from hvd_compress.communication.codec import chunk_bounds
from hvd_compress.state import piece_key
from test_horovod import SHAPES, _max_error, _synchronized_grads
from test_planner import _conservation

SPECS = catalogue.hierarchical() + catalogue.hierarchical("hierarchical_compressed")
NODES, PER_NODE = 2, 2


def reference(spec: str, grads_per_rank: list[list[dict]], average: bool) -> list[dict]:
    """What every rank should hold after each step: the route's algorithm in one process, one
    compressor per simulated rank (rank = node * PER_NODE + local rank). Inside each node the
    ranks' shards are summed (dense, or each rank's shards compressed with its own residual and
    decoded by the shard's owner); the owner of shard j compresses its node's mean with its node
    residual, and the payloads are summed in node order. Small tensors (Horovod's dense path)
    are averaged."""
    inside = "hierarchical_compressed" in spec
    compressors = [hc.from_spec(spec) for _ in grads_per_rank]
    for rank, c in enumerate(compressors):
        c.noise_rank = rank
    results = []
    for step in range(len(grads_per_rank[0])):
        out = {}
        for name, shape in SHAPES.items():
            shape = torch.Size(shape)
            grads = [g[step][name] for g in grads_per_rank]
            if not compressors[0].compressible(torch.zeros(shape)):
                out[name] = sum(g for g in grads if g is not None) / (len(grads) if average else 1)
                continue
            n = shape.numel()
            bounds = chunk_bounds(n, PER_NODE)
            chunks = []
            for c, g in zip(compressors, grads):
                acc = c.memory.compensate(name, g) if inside and g is not None else None
                chunks.append(None if g is None else
                              [c.encode(acc[lo:hi], g.reshape(-1)[lo:hi], shape, piece_key(name, lo, hi, n))
                               if inside else g.reshape(-1)[lo:hi] for lo, hi in bounds])
            total = torch.zeros(n)
            for j, (lo, hi) in enumerate(bounds):
                shard = torch.zeros(hi - lo)
                for node in range(NODES):
                    owner = compressors[node * PER_NODE + j]
                    present = [rank[j] for rank in chunks[node * PER_NODE:(node + 1) * PER_NODE]
                               if rank is not None]
                    if not present:
                        continue
                    mean = torch.zeros(hi - lo)
                    for part in present:
                        owner.decode_add(part, mean, shape) if inside else mean.add_(part)
                    mean /= PER_NODE
                    key = f"{name}#node"
                    acc = owner.memory.compensate(key, mean)
                    owner.decode_add(owner.encode(acc, mean, shape, key), shard, shape)
                total[lo:hi] = shard
            total *= 1 / NODES if average else PER_NODE
            compressors[0].aggregate(total)
            out[name] = total.view(shape)
        results.append(out)
    return results


def _checks(specs: list[str]) -> dict:
    import horovod.torch as hvd

    hvd.init()
    torch.set_num_threads(1)
    found = {"layout": (hvd.local_rank(), hvd.local_size(), hvd.cross_rank(), hvd.cross_size()),
             "errors": {}, "grads": {}, "stats": {}}
    skip = {(1, 0, "v"), (2, 1, "w")} | {(3, rank, "v") for rank in range(hvd.size())}
    cases = {"average": {}, "sum": {"op_name": "Sum"}, "missing_grads": {"skip": skip}}
    for spec in specs:
        for case, kwargs in cases.items():
            got, inputs = _synchronized_grads(spec, steps=4, **kwargs)
            want = reference(spec, inputs, average=kwargs.get("op_name") != "Sum")
            found["errors"][spec, case] = _max_error(got, want)
            found["grads"][spec, case] = [{n: g.numpy().tobytes() for n, g in step.items()} for step in got]
    params = {name: torch.nn.Parameter(torch.zeros(shape)) for name, shape in SHAPES.items()}
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(params.values(), lr=0.0), named_parameters=params.items(),
                                         compression=hc.from_spec(specs[0]))
    sum(p.sum() for p in params.values()).backward()
    optimizer.step()
    found["routes"] = optimizer._hvd_compress.routes
    return found


@functools.cache
def findings() -> list[dict]:
    return run_workers(_checks, NODES * PER_NODE, SPECS, nodes=NODES)


def test_the_launch_is_two_nodes_of_two_and_the_route_is_taken():
    assert [rank["layout"] for rank in findings()] == [(0, 2, 0, 2), (1, 2, 0, 2), (0, 2, 1, 2), (1, 2, 1, 2)]
    assert all(rank["routes"] == {"w": "hierarchical", "v": "hierarchical"} for rank in findings())


@pytest.mark.parametrize("case", ["average", "sum", "missing_grads"])
def test_aggregate_equals_single_process_reference(case):
    for rank in findings():
        for spec in SPECS:
            assert rank["errors"][spec, case] <= 1e-6, (spec, case, rank["errors"][spec, case])


def test_ranks_hold_bitwise_identical_aggregates():
    for spec in SPECS:
        for case in ("average", "sum", "missing_grads"):
            assert len({str(rank["grads"][spec, case]) for rank in findings()}) == 1, (spec, case)


def test_every_method_that_can_take_it_is_tested_and_the_others_refuse_it():
    takes = {spec.split(":")[0] for spec in SPECS}
    assert {"topk", "onebit", "adacomp", "qsgd"} <= takes
    for refused in ("powersgd", "dgc:momentum=0", "signsgd", "signum"):
        for way in ("hierarchical", "hierarchical_compressed"):
            with pytest.raises(ValueError, match="communication"):
                hc.from_spec(f"{refused}{',' if ':' in refused else ':'}communication={way}")


@pytest.mark.parametrize("spec", ["topk:ratio=0.01", "onebit"])
def test_route_switches_through_hierarchical_keep_error_feedback_exact(spec):
    from hvd_compress.communication import planner

    # slow across nodes as far as the model knows: it proposes hierarchical plans, and the
    # trials switch routes to and from them (loopback then decides)
    link = cost.Link(0.01, intra_gbit=50, cross_gbit=0.005)
    ranks = run_workers(_conservation, NODES * PER_NODE, spec, 1 + 4 * planner.MAX_BLOCK + 5, link, nodes=NODES)
    for rank in ranks:
        assert "hierarchical" in rank["tried"], rank["tried"]
        assert rank["error"] < 1e-3, rank["error"]
    assert all(all(torch.equal(a, b) for a, b in zip(ranks[0]["digest"], r["digest"])) for r in ranks)


@pytest.mark.parametrize("everyone, rank, want", [
    # two nodes of two, in Horovod's order
    ([[0, 0, 2], [0, 1, 2], [2, 0, 2], [2, 1, 2]], 3, ((2, 3), (1, 3), 1, 1)),
    ([[0, 0, 2], [0, 1, 2], [2, 0, 2], [2, 1, 2]], 0, ((0, 1), (0, 2), 0, 0)),
    # local ranks out of rank order: the node's ranks by local rank
    ([[0, 1, 2], [0, 0, 2], [2, 0, 2], [2, 1, 2]], 1, ((1, 0), (1, 2), 0, 0)),
])
def test_layout_of_whole_nodes(everyone, rank, want):
    nodes = topology.layout(everyone, rank)
    assert (nodes.local, nodes.cross, nodes.local_rank, nodes.node) == want
    assert (nodes.size, nodes.count) == (2, 2)


@pytest.mark.parametrize("everyone", [
    [[0, 0, 3], [0, 1, 3], [0, 2, 3], [3, 0, 1]],  # nodes of 3 and 1
    [[0, 0, 2], [0, 1, 2]],  # one node
    [[0, 0, 1], [1, 0, 1]],  # one worker a node: flat is all there is
])
def test_layouts_the_route_cannot_serve(everyone):
    assert topology.layout(everyone, 0) is None


NODES_2X4 = topology.Nodes(size=4, count=2, local=(0, 1, 2, 3), cross=(0, 4), local_rank=0, node=0)


def test_on_nodes_the_uplink_carries_about_one_payload_per_remote_node():
    topk = hc.TopK(ratio=0.01)
    n = 4_000_000
    flat = route.costs(topk, torch.Size([n]), 4, 8)["allgather"]
    node = route.costs(topk, torch.Size([n]), 4, 8, nodes=NODES_2X4)["hierarchical"]
    uplink_flat = flat.bytes  # a ring allgather's node-crossing edge carries (p-1) payloads
    uplink_node = 4 * node.cross_bytes  # the node's 4 workers, each its shard's payload
    payload = topk.expected_bytes(n, torch.Size([n]))
    assert uplink_node <= 1.3 * payload * 2 * (NODES_2X4.count - 1) / NODES_2X4.count
    assert uplink_flat / uplink_node > 3.5


def test_a_static_plan_on_slow_uplinks_takes_the_hierarchical_route_for_large_tensors():
    topk = hc.TopK(ratio=0.01, link_gbit=0.1)
    tensors = [("big", torch.Size([2048, 2048]), 4), ("small", torch.Size([2048]), 4)]
    plan = route.plan(topk, tensors, 8, nodes=NODES_2X4)
    assert plan["big"] in topology.HIERARCHICAL
    assert route.plan(topk, tensors, 8) ["big"] != "hierarchical"  # no nodes known: flat


def test_forced_hierarchical_without_nodes_takes_the_allgather():
    topk = hc.TopK(ratio=0.01, communication="hierarchical")
    assert route.plan(topk, [("w", torch.Size([4096]), 4)], 4) == {"w": "allgather"}
    assert route.plan(topk, [("w", torch.Size([4096]), 4)], 8, nodes=NODES_2X4) == {"w": "hierarchical"}
