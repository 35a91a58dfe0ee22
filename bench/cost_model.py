"""The communication cost model (hvd_compress/communication/cost.py) against the simulated
cluster, and projected to 1,024 workers (flat) and to 128 nodes of 8 workers (the node dimension:
the hierarchical routes).

    sudo .venv/bin/python bench/cost_model.py fit       # time gloo collectives: c and a
    .venv/bin/python bench/cost_model.py cpu            # the compressed path's CPU per tensor
    .venv/bin/python bench/cost_model.py                # check against measured cells, project

``fit`` runs bench/link_probe.py on the simulated cluster (np=2 and 4, unthrottled) and fits
the per-collective overhead c and per-round latency a of ``time = c + rounds * a`` to the
small messages (bench/results/link.json). ``cpu`` runs bench/cpu_probe.py under horovodrun
on this machine (np=2 and 4) and fits cost.py's CPU constants, ``seconds = calls * call +
numel * element``, to the compress and decode phases it timed (bench/results/link.json,
cell "cpu"). The check predicts, per model, method and world size, the bytes a
worker sends per step (the parameters of examples/models.py, each routed as the hook routes
it) and compares them with the interface counters of bench/results/wire_bytes.json; it
predicts the communication time of a step at 100 Mbit/s and compares it with the measured step
time at 100 Mbit/s less the unthrottled one (bench/results/throughput.json). Then it projects
bytes and time to p = 1,024 at 0.1 to 100 Gbit/s (bench/results/cost_model.json and
cost_model.png, with the measured points on the same axes).

The model counts TCP payload; an interface counter also counts each 1448-byte segment's 66
bytes of Ethernet, IP and TCP headers (MTU 1500, TCP timestamps) and a 66-byte ACK for every
two segments the worker receives: ``WIRE`` converts one into the other.
"""
import argparse
import functools
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
from common import RESULTS, ResultCache, load, with_option  # noqa: E402

WIRE = (1448 + 66) / 1448 + 66 / (2 * 1448)  # interface bytes per TCP payload byte, ring traffic
PROJECTED_P = [2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
PROJECTED_GBIT = [0.1, 1, 10, 100]
MEASURED_METHODS = ["none", "fp16", "topk:ratio=0.01", "onebit", "adacomp", "ddp:powersgd:1",
                    "ddp:powersgd:4"]


def fit() -> None:
    from netsim import Cluster, exit_unless_available

    exit_unless_available("cost_model fit")
    cache = ResultCache("link")
    for workers in (2, 4):
        if cache.get(f"np={workers}") is not None:
            continue
        with Cluster(workers, None) as cluster:
            outputs = cluster.run([sys.executable, os.path.join(HERE, "link_probe.py")], timeout=600)
        ranks = [json.loads(out.strip().splitlines()[-1]) for out in outputs]
        cache.put(f"np={workers}", ranks[0]["times"])
    rounds = {"allreduce": lambda p: 2 * (p - 1), "allgather": lambda p: p - 1, "alltoall": lambda p: p - 1}
    # time = c + rounds * a over the small messages (the first size, 8 bytes, also pays each
    # collective's first-call set-up, so it is left out)
    xs, ys = [], []
    for key, times in cache.data["cells"].items():
        if key.startswith("np="):
            for collective, by_size in times.items():
                for size in ("1024", "16384"):
                    xs.append([1.0, rounds[collective](int(key[3:]))])
                    ys.append(by_size[size])
    (overhead, latency), *_ = np.linalg.lstsq(np.array(xs), np.array(ys), rcond=None)
    cache.put("fit", {"overhead_s": overhead, "latency_s": latency, "points": [[x[1], y] for x, y in zip(xs, ys)]})
    print(f"per-collective overhead {overhead * 1e6:.0f} us, per-round latency {latency * 1e6:.0f} us "
          f"from {len(xs)} small-message timings")


def fit_cpu() -> None:
    import subprocess

    cache = ResultCache("link")
    horovodrun = os.path.join(os.path.dirname(sys.executable), "horovodrun")
    rows = []
    for workers in (2, 4):
        out = subprocess.run([horovodrun, "-np", str(workers), "-H", f"localhost:{workers}", "--gloo",
                              sys.executable, os.path.join(HERE, "cpu_probe.py")],
                             check=True, capture_output=True, text=True, timeout=1200).stdout
        rank0 = next(line for line in out.splitlines() if line.startswith("[0]<stdout>:["))
        rows += json.loads(rank0.split(":", 1)[1])
    xs = np.array([[r["calls"], r["numel"]] for r in rows])
    (call, element), *_ = np.linalg.lstsq(xs, np.array([r["seconds"] for r in rows]), rcond=None)
    cache.put("cpu", {"call_s": call, "element_s": element, "points": rows})
    print(f"compressed path CPU: {call * 1e6:.0f} us per encode or decode call, "
          f"{element * 1e9:.2f} ns per element, from {len(rows)} timings")


def on_wire(c):
    """A Cost with its TCP payload bytes converted to interface bytes."""
    import dataclasses

    return dataclasses.replace(c, bytes=c.bytes * WIRE, intra_bytes=c.intra_bytes * WIRE,
                               cross_bytes=c.cross_bytes * WIRE)


@functools.cache
def _shapes(model_name: str) -> list[tuple]:
    from models import MODELS

    return [tuple(t.shape) for t in MODELS[model_name]().parameters()]


def step_cost(model_name: str, method: str, p: int, gbit: float, fitted: dict, nodes=None):
    """(Cost of one step's communication for one worker, Link) under the model; on ``nodes``
    (topology.Nodes) ``gbit`` is the inter-node link, which a node's workers share."""
    import torch

    import hvd_compress as hc
    from hvd_compress.communication import cost, route
    params = [torch.empty(shape, device="meta") for shape in _shapes(model_name)]
    link = cost.Link(gbit, fitted["latency_s"], fitted["overhead_s"],
                     *((cost.INTRA_GBIT, gbit / nodes.size) if nodes else ()))
    total = cost.Cost(0.0)
    method = {"ddp:fp16": "fp16", "ddp:allreduce": "none"}.get(method, method)
    if method in ("none", "fp16"):
        return cost.dense((4 if method == "none" else 2) * sum(t.numel() for t in params), p), link
    if method.startswith("ddp:powersgd:"):  # every matrix's factors, vectors dense
        rank, factored = int(method.rsplit(":", 1)[1]), lambda t: t.dim() > 1
    else:
        compressor = hc.from_spec(method)
        rank, factored = getattr(compressor, "rank", 0), compressor.compressible
    if rank:
        for t in params:
            total += (cost.powersgd(t.shape[0], t.numel() // t.shape[0], rank, p) if factored(t)
                      else cost.dense(4 * t.numel(), p))
        return total, link
    tensors = [(str(i), t.shape, 4) for i, t in enumerate(params) if compressor.compressible(t)]
    routes = route.plan(compressor, tensors, p, nodes=nodes)
    for i, t in enumerate(params):
        way = routes.get(str(i), "dense")
        total += (route.costs(compressor, t.shape, 4, p, nodes=nodes)[way] if way != "dense"
                  else cost.dense(4 * t.numel(), p))
    return total, link


def check(fitted: dict) -> list[dict]:
    """Predicted against measured bytes (np=2/4/8) and communication time at 100 Mbit/s."""
    rows = []
    wire = load("wire_bytes") or {"cells": {}}
    for c in wire["cells"].values():
        if c["method"].startswith("ddp:"):
            continue
        predicted, _ = step_cost(c["model"], c["method"], c["np"], c["rate_mbit"] / 1000, fitted)
        rows.append({"kind": "bytes", "model": c["model"], "np": c["np"], "method": c["method"],
                     "measured": c["tx_bytes_per_step"], "predicted": on_wire(predicted).bytes})
    throughput = load("throughput") or {"cells": {}}
    cells = {(c["model"], c["np"], c["method"], c["rate_mbit"]): c for c in throughput["cells"].values()}
    for (model, p, method, rate), slow in cells.items():
        fast = cells.get((model, p, method, None))
        if rate != 100 or fast is None:
            continue
        step = lambda c: c["batch_size"] * c["np"] / c["samples_per_s"]  # noqa: E731
        predicted, link = step_cost(model, method, p, 0.1, fitted)
        rows.append({"kind": "seconds", "model": model, "np": p, "method": method,
                     "measured": step(slow) - step(fast), "predicted": link.seconds(on_wire(predicted))})
    return rows


def project(fitted: dict, model: str) -> dict:
    methods = {"dense fp32": "none", "dense fp16": "fp16", "PowerSGD r=1": "ddp:powersgd:1",
               "PowerSGD r=4": "ddp:powersgd:4"}
    for spec in ("topk:ratio=0.01", "onebit", "adacomp"):
        methods[f"{spec} (auto)"] = spec
        methods[f"{spec} allgather"] = with_option(spec, "communication=allgather")
    out = {}
    for label, method in methods.items():
        for gbit in PROJECTED_GBIT:
            ours = not method.startswith("ddp:") and method not in ("none", "fp16")
            auto = with_option(method, f"link_gbit={gbit}") if ours else method
            points = []
            for p in PROJECTED_P:
                c, link = step_cost(model, auto, p, gbit, fitted)
                points.append({"p": p, "bytes": on_wire(c).bytes, "seconds": link.seconds(on_wire(c))})
            out.setdefault(label, {"method": method, "by_rate": {}})["by_rate"][str(gbit)] = points
    return out


#: nodes of 8 workers, as GPU servers hold them, and the node counts projected
PER_NODE = 8
PROJECTED_NODES = [2, 4, 8, 16, 32, 64, 128]


def project_nodes(fitted: dict, model: str) -> dict:
    """Bytes through each node's uplink per step, and communication seconds, on nodes of
    ``PER_NODE`` workers, for dense Horovod and TopK/OneBit flat (allgather) and hierarchical:
    a flat ring's node-crossing edge carries a worker's ring bytes; the hierarchical routes' uplink
    carries its workers' cross-node bytes."""
    from hvd_compress.communication.topology import Nodes

    methods = {"dense fp32": "none"}
    for spec in ("topk:ratio=0.01", "onebit"):
        for way in ("allgather", "hierarchical", "hierarchical_compressed"):
            methods[f"{spec} {way}"] = with_option(spec, f"communication={way}")
    out = {}
    for label, method in methods.items():
        for gbit in PROJECTED_GBIT:
            points = []
            for count in PROJECTED_NODES:
                nodes = Nodes(size=PER_NODE, count=count, local=tuple(range(PER_NODE)),
                              cross=tuple(range(0, PER_NODE * count, PER_NODE)), local_rank=0, node=0)
                c, link = step_cost(model, method, PER_NODE * count, gbit, fitted, nodes)
                c = on_wire(c)
                points.append({"nodes": count, "uplink_bytes": c.bytes + PER_NODE * c.cross_bytes,
                               "seconds": link.seconds(c)})
            out.setdefault(label, {"method": method, "by_rate": {}})["by_rate"][str(gbit)] = points
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", nargs="?", default="check", choices=["fit", "cpu", "check"])
    args = parser.parse_args()
    if args.action in ("fit", "cpu"):
        fit() if args.action == "fit" else fit_cpu()
        return
    link = load("link")
    if link is None or "fit" not in link["cells"]:
        sys.exit("cost_model: run `sudo .venv/bin/python bench/cost_model.py fit` first")
    fitted = {k: link["cells"]["fit"][k] for k in ("latency_s", "overhead_s")}
    result = {**fitted, "wire_factor": WIRE, "check": check(fitted),
              "projection": {m: project(fitted, m) for m in ("widemlp", "resnet18")},
              "nodes_projection": {m: project_nodes(fitted, m) for m in ("widemlp", "resnet18")}}
    with open(os.path.join(RESULTS, "cost_model.json"), "w") as f:
        json.dump(result, f, indent=1)
    for row in result["check"]:
        ratio = row["predicted"] / row["measured"] if row["measured"] > 0 else float("nan")
        print(f"{row['kind']:8s} {row['model']:9s} np={row['np']} {row['method']:32s} "
              f"measured {row['measured']:12.4g} predicted {row['predicted']:12.4g} ({ratio:.2f}x)")
    import plots

    print("wrote", *plots.cost_model(result), *plots.nodes_projection(result))


if __name__ == "__main__":
    main()
