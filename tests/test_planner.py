"""``communication="auto"`` measured and tried (communication/planner.py): route switches keep
error feedback exact and ranks identical, and on a throttled link the measured plan compresses
while an unthrottled one may not. The simulated-cluster test needs root (bench/netsim.py)."""
import json
import os
import sys

import pytest
import torch

import hvd_compress as hc
from harness import run_workers
from hvd_compress.communication import planner as planner_module
from hvd_compress.communication.twophase import chunk_bounds

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
from netsim import Cluster, unavailable  # noqa: E402


class _ProcessSet:
    def __init__(self, size: int, rank: int) -> None:
        self._size, self._rank = size, rank

    def size(self) -> int:
        return self._size

    def rank(self) -> int:
        return self._rank


class _Exchange:
    def __init__(self, size: int, rank: int, average: bool) -> None:
        self.process_set, self.average, self.prefix = _ProcessSet(size, rank), average, "test"
        self.nodes = None


@pytest.mark.parametrize("average", [True, False])
def test_leaving_two_phase_moves_the_server_residual_into_the_worker_residual(average):
    compressor = hc.TopK(0.01, link_gbit=None)
    n, ranks, rank = 4000, 4, 2
    lo, hi = chunk_bounds(n, ranks)[rank]
    worker = compressor.memory.buffer("w", torch.zeros(n))
    worker.copy_(torch.arange(n, dtype=torch.float32))
    compressor.memory.buffer("w#server", torch.zeros(hi - lo)).fill_(0.5)
    planner = planner_module.Planner(compressor, [("w", torch.Size((n,)), 4)], _Exchange(ranks, rank, average), 0)
    planner.routes = {"w": "twophase"}
    assert planner._use({"w": "allgather"})
    expected = torch.arange(n, dtype=torch.float32)
    expected[lo:hi] += 0.5 * (ranks if average else 1)
    assert torch.equal(compressor.memory.residuals()["w"], expected)
    assert "w#server" not in compressor.memory.residuals()


def test_going_dense_adds_the_residual_to_the_next_gradient_once():
    compressor = hc.TopK(0.01, link_gbit=None)
    compressor.memory.buffer("w", torch.zeros(10)).fill_(0.25)
    planner = planner_module.Planner(compressor, [("w", torch.Size((10,)), 4)], _Exchange(2, 0, True), 0)
    planner.routes = {"w": "allgather"}
    planner._use({"w": "dense"})
    grad = torch.ones(10)
    planner.fold_released("w", grad)
    planner.fold_released("w", grad)  # a second dense step adds nothing more
    assert torch.equal(grad, torch.full((10,), 1.25)) and compressor.memory.residuals() == {}


def _conservation(spec: str, steps: int, link=None) -> dict:
    """SGD with lr 1 on w (loss (w * g).sum()): -w is the sum of the aggregates, so with every
    rank's residual (worker residuals; two-phase server and node residuals in worker units) it
    must give the sum of the averaged gradients, whatever routes
    the planner tried on the way (dense, compressed, and back). ``link``: what the probe says
    (default: a 10 Mbit/s link)."""
    os.environ.pop("HVD_COMPRESS_LINK_GBIT", None)
    import horovod.torch as hvd

    from hvd_compress.communication import cost, probe

    # a slow link as far as the model knows, so that it proposes compressed plans and the
    # trials switch routes (the real link, loopback, then decides)
    probe.link = lambda process_set, prefix, nodes=None: link or cost.Link(0.01)
    # no confirmation re-trials (a loopback's plans differ by noise): the steps below suffice
    # for one round of trials, and re-trials switch routes by the same code
    planner_module.RETRIALS = 0
    hvd.init()
    torch.set_num_threads(1)
    params = {"w": torch.nn.Parameter(torch.zeros(300, 200)), "v": torch.nn.Parameter(torch.zeros(64, 100))}
    compressor = hc.from_spec(spec)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(params.values(), lr=1.0),
                                         named_parameters=params.items(), compression=compressor)
    total = {name: torch.zeros_like(p, dtype=torch.float64) for name, p in params.items()}
    tried = set()
    for step in range(steps):
        optimizer.zero_grad()
        loss = 0
        for name, p in params.items():
            grads = [torch.randn(p.shape, generator=torch.Generator().manual_seed(100 * step + 10 * r + len(name)))
                     for r in range(hvd.size())]
            total[name] += sum(g.double() for g in grads) / hvd.size()
            loss = loss + (p * grads[hvd.rank()]).sum()
        loss.backward()
        optimizer.step()
        tried |= set(optimizer._hvd_compress.routes.values())
    residuals = compressor.memory.residuals()
    error = 0.0
    for name, p in params.items():
        mine = residuals.get(name, torch.zeros(p.numel())).double().clone()
        # a two-phase server's region and a node's shard, in worker units (planner.py's folds)
        for key, parts, part in ((f"{name}#server", hvd.size(), hvd.rank()),
                                 (f"{name}#node", hvd.local_size(), hvd.local_rank())):
            piece = residuals.get(key)
            if piece is not None:
                lo, hi = chunk_bounds(p.numel(), parts)[part]
                mine[lo:hi] += parts * piece.double()
        unsent = hvd.allreduce(mine.view(p.shape), op=hvd.Average, name=f"residual.{name}")
        error = max(error, float((-p.detach().double() + unsent - total[name]).abs().max()))
    plan = compressor.stats()["plan"]
    dense_kept = [name for name, way in plan["routes"].items() if way == "dense" and name in residuals]
    return {"error": error, "plan": plan, "dense_kept": dense_kept, "tried": sorted(tried),
            "digest": [p.detach().clone() for p in params.values()]}


@pytest.mark.parametrize("spec", ["topk:ratio=0.01", "onebit"])
def test_route_switches_keep_error_feedback_exact_and_ranks_identical(spec):
    ranks = run_workers(_conservation, 2, spec, 1 + 3 * planner_module.MAX_BLOCK + 5)
    for rank in ranks:
        tried = len(rank["plan"]["candidates"])
        assert rank["plan"]["state"] == "final" and tried >= 2
        assert (1 + planner_module.MIN_BLOCK * tried <= rank["plan"]["final_at_step"]
                <= 1 + planner_module.MAX_BLOCK * tried)
        assert rank["error"] < 1e-3, rank["error"]  # no residual lost or applied twice
        assert rank["dense_kept"] == []  # a tensor gone dense sent its residual
    assert all(torch.equal(a, b) for a, b in zip(ranks[0]["digest"], ranks[1]["digest"]))
    local = ("probe_s", "link_probe_s", "cpu_probe_s")  # each rank's own clock
    assert ({k: v for k, v in ranks[0]["plan"].items() if k not in local}
            == {k: v for k, v in ranks[1]["plan"].items() if k not in local})


@pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))
def test_on_a_throttled_link_the_measured_plan_compresses():
    script = [sys.executable, os.path.join(REPO, "tests", "scripts", "measured_auto.py"), "topk", "70"]
    with Cluster(workers=2, rate_mbit=100) as cluster:
        outputs = cluster.run(script, timeout=300)
    plans = [json.loads(out.strip().splitlines()[-1])["plan"] for out in outputs]
    for plan in plans:
        assert 0.05 < plan["measured"]["gbit"] < 0.2, plan["measured"]  # a 100 Mbit/s link
        assert plan["state"] == "final" and plan["chosen"] != 0, plan  # not all dense
        dense, chosen = plan["candidates"][0], plan["candidates"][plan["chosen"]]
        assert chosen["measured_s"] < 0.5 * dense["measured_s"]
        assert plan["probe_s"] < 2.0
    assert plans[0]["routes"] == plans[1]["routes"]


def test_a_resumed_final_plan_is_taken_without_trials():
    saved = hc.TopK(0.01, link_gbit=None)
    saved.accounting.plan = {"state": "final", "routes": {"w": "allgather", "v": "dense"}}
    state = saved.state_dict()
    resumed = hc.TopK(0.01, link_gbit=None)
    resumed.load_state_dict(state)
    tensors = [("w", torch.Size((100, 100)), 4), ("v", torch.Size((50, 50)), 4)]
    planner = planner_module.Planner(resumed, tensors, _Exchange(2, 0, True), 0)
    assert planner.routes == {"w": "allgather", "v": "dense"}
    assert not any(planner.step_finished() for _ in range(planner_module.WINDOW + 5))  # no probe
    assert planner.final_time is not None and resumed.stats()["plan"]["resumed"]
    fresh = planner_module.Planner(hc.TopK(0.01, link_gbit=None), tensors, _Exchange(2, 0, True), 0)
    assert set(fresh.routes.values()) == {"dense"}  # warm-up


def test_a_plan_final_without_trials_gets_its_drift_check(monkeypatch):
    """Where the model predicts no plan faster than dense, the plan is dense at step 1; the
    drift check then runs from the baseline of its first steps (a RECHECK-th step once divided
    by a baseline of zero), and a drift re-tries dense, its only plan, without confirming it
    against rivals it does not have (a drift there once ended in min() of nothing)."""
    from hvd_compress.communication import cost

    planner, clock = _clocked_planner(monkeypatch, cost.Link(1000.0), cost.Cpu(1.0, 1e-6), 100 * 100)

    def run(seconds: float, steps: int, in_trials: float | None = None) -> bool:
        changed = False
        for _ in range(steps):
            clock[0] += in_trials if in_trials and planner.report["state"] == "trials" else seconds
            changed |= planner.step_finished()
        return changed

    assert not run(0.01, planner_module.RECHECK + 2)
    plan = planner.report
    assert plan["state"] == "final" and plan["final_at_step"] == 1 and plan["chosen"] == 0
    assert plan["drift"] < 1e-9 and planner.routes == {"w": "dense"}
    # 30 times slower, and dense's re-trial faster than the steps after it
    assert not run(0.3, planner_module.RECHECK + planner_module.MAX_BLOCK, in_trials=0.1)
    assert plan["state"] == "final" and plan["drift"] > planner_module.DRIFT and plan["final_at_step"] > 1


def _clocked_planner(monkeypatch, link=None, cpu=None, numel: int = 10 ** 6, ranks: int = 2
                     ) -> tuple[planner_module.Planner, list[float]]:
    """A planner of one tensor of ``numel`` elements on one rank of ``ranks`` whose probe measures ``link``
    and ``cpu`` (by default: compressing pays, a 10 Mbit/s link), and the clock its steps are
    timed by (the test moves it)."""
    import types

    from hvd_compress.communication import cost, probe

    monkeypatch.setattr(probe, "link", lambda process_set, prefix, nodes=None: link or cost.Link(0.01))
    monkeypatch.setattr(probe, "cpu", lambda compressor, ranks: cpu or cost.Cpu(1e-6, 1e-10))
    monkeypatch.setattr(probe, "agreed", lambda values, process_set, name: list(values))
    clock = [0.0]
    monkeypatch.setattr(planner_module, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    planner = planner_module.Planner(hc.TopK(0.01, link_gbit=None), [("w", torch.Size((numel,)), 4)],
                                     _Exchange(ranks, 0, True), 0)
    return planner, clock


def test_a_final_plan_slower_than_a_rival_trial_runs_the_trials_again(monkeypatch):
    """Trials that misled (dense at burst speed, the compressed block stalled) are caught by the
    final plan's first steps and run again; a plan that runs as its trial said stays."""
    planner, clock = _clocked_planner(monkeypatch)

    def run(seconds: dict[str, float], steps: int = 1000, until: str | None = None) -> None:
        for _ in range(steps):
            clock[0] += seconds["dense"] if planner.routes["w"] == "dense" else seconds["compressed"]
            planner.step_finished()
            if until and planner.report["state"] == until:
                return

    misled = {"dense": 0.010, "compressed": 0.018}
    run(misled, 1)
    assert planner.report["state"] == "trials" and len(planner.plans) >= 2
    run(misled, until="confirming")
    assert planner.report["chosen"] == 0 and planner.routes == {"w": "dense"}
    real = {"dense": 0.021, "compressed": 0.005}
    run(real, planner_module.WINDOW)  # dense's first steps: slower than the compressed trial
    assert planner.report["state"] == "trials" and planner.report["retrials"] == 1
    run(real, until="confirming")
    assert planner.report["chosen"] != 0 and planner.routes != {"w": "dense"}
    confirmed_at = planner.step + planner_module.WINDOW
    run(real, planner_module.WINDOW + 5)
    plan = planner.report
    assert plan["state"] == "final" and plan["retrials"] == 1 and abs(plan["confirm_s"] - 0.005) < 1e-9
    assert plan["final_at_step"] == confirmed_at


def test_a_final_plan_that_runs_as_its_trial_said_is_kept(monkeypatch):
    """Noise between plans of about the same speed does not trigger a re-trial."""
    planner, clock = _clocked_planner(monkeypatch)
    seconds = {"dense": 0.010, "compressed": 0.0105}
    for step in range(1000):
        clock[0] += seconds["dense" if planner.routes["w"] == "dense" else "compressed"] * (1.2 if step % 2 else 1)
        planner.step_finished()
    plan = planner.report
    assert plan["state"] == "final" and "retrials" not in plan and plan["chosen"] == 0


def test_a_drift_re_tries_a_compressed_plan_among_compressed_plans_only(monkeypatch):
    """A model trained on compressed gradients loses quality when it goes dense (planner.py, 5):
    a drift re-runs the trials without dense; a dense plan's drift still tries every plan."""
    planner, clock = _clocked_planner(monkeypatch, ranks=8)  # two compressed plans: allgather, two-phase
    used = []

    def run(seconds: dict[str, float], steps: int) -> None:
        for _ in range(steps):
            way = "dense" if planner.routes["w"] == "dense" else "compressed"
            used.append(way)
            clock[0] += seconds[way]
            planner.step_finished()

    run({"dense": 0.020, "compressed": 0.005}, 2 * planner_module.RECHECK)
    plan = planner.report
    assert plan["state"] == "final" and plan["chosen"] != 0 and len(planner.plans) >= 3
    first_final, used[:] = plan["final_at_step"], []
    run({"dense": 0.005, "compressed": 0.015}, 2 * planner_module.RECHECK)  # dense now faster
    assert plan["final_at_step"] > first_final  # the drift ran the trials again
    assert "dense" not in used and planner.routes != {"w": "dense"}
    assert sorted(planner.tried) == list(range(1, len(planner.plans)))


def test_a_resumed_compressed_plan_measures_its_candidates_at_its_first_drift(monkeypatch):
    """A plan resumed from a checkpoint has no candidates; its first drift measures them (it once
    indexed an empty list) and tries the compressed ones."""
    planner, clock = _clocked_planner(monkeypatch, ranks=8)
    resumed = hc.TopK(0.01, link_gbit=None)
    resumed.resumed_routes = {"w": "allgather"}
    planner = planner_module.Planner(resumed, planner.tensors, planner.exchange, 0)
    for step in range(2 * planner_module.RECHECK):
        clock[0] += 0.005 if step < planner_module.RECHECK // 2 else 0.02
        planner.step_finished()
    plan = planner.report
    assert plan["resumed"] and plan["state"] == "final" and len(plan["candidates"]) >= 3
    assert sorted(planner.tried) == list(range(1, len(planner.plans))) and planner.routes != {"w": "dense"}


def test_a_drift_s_confirmation_re_trial_leaves_dense_out_too(monkeypatch):
    """A compressed plan chosen by a drift's trials and contradicted by its first steps runs the
    trials again without dense; a resumed dense plan's drift tries every plan."""
    planner, clock = _clocked_planner(monkeypatch, ranks=8)
    used = []

    def run(seconds, steps: int) -> None:
        for _ in range(steps):
            way = planner.routes["w"]
            used.append(way)
            clock[0] += seconds(way)
            planner.step_finished()

    run(lambda way: 0.020 if way == "dense" else 0.005, 2 * planner_module.RECHECK)
    assert planner.settled and planner.report["chosen"] != 0
    used[:] = []
    # every plan slower, and whichever plan the trials choose runs slower after them
    run(lambda way: 0.010 if planner.report["state"] == "trials" else 0.030, planner_module.RECHECK + 400)
    assert planner.report.get("retrials", 0) >= 1 and "dense" not in used

    resumed = hc.TopK(0.01, link_gbit=None)
    resumed.resumed_routes = {"w": "dense"}
    planner = planner_module.Planner(resumed, planner.tensors, planner.exchange, 0)
    used[:] = []
    run(lambda way: 0.005 if len(used) < planner_module.RECHECK // 2 else 0.02, 2 * planner_module.RECHECK)
    assert not planner.settled and planner.tried and 0 in planner.tried


def test_the_planner_s_agreements_keep_one_name_each_however_long_it_runs(monkeypatch):
    """Horovod's response cache keeps every name it reduced, and each of its cycles pays for them
    (planner.py): rounds of trials after drifts must not add a name per step."""
    from hvd_compress.communication import probe

    planner, clock = _clocked_planner(monkeypatch, ranks=8)
    names = []
    monkeypatch.setattr(probe, "agreed", lambda values, process_set, name: names.append(name) or list(values))
    rounds, state = 0, None
    for step in range(12 * planner_module.RECHECK):
        clock[0] += 0.005 if (step // (2 * planner_module.RECHECK)) % 2 else 0.02  # a drift every 400 steps
        planner.step_finished()
        rounds += planner.report["state"] == "trials" != state
        state = planner.report["state"]
    assert rounds >= 5 and len(names) > 100
    assert len(set(names)) <= 5, sorted(set(names))

