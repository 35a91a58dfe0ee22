"""What a route switch does to training: the PTB LSTM (examples/pytorch_ptb_lm.py) at np=2 on
loopback, a compressor that ``auto`` first keeps compressed, then switched to dense for good at
its first re-check (about step 60 of the quarter epoch's 104), against the same compressor kept
compressed and against Horovod's own ``none``.

    .venv/bin/python bench/route_switch.py                      # AdaComp, every arm
    .venv/bin/python bench/route_switch.py --method onebit

Why: the first converged runs of bench/quality.py trained on loopback, where ``auto``'s trials and
drift re-checks switched the LSTM between compressed and dense, and AdaComp there lagged far behind
the same method trained compressed throughout (after one epoch at np=4: validation perplexity 397
against 307). This bench isolates the switch. The arms (the planner's decisions forced, every rank
alike, by patching communication/planner.py in each worker; the link probe reports 10 Mbit/s so
that the cost model proposes compressed plans on loopback):

* ``compressed``: the compressed plan after the first trials, for good (no re-check).
* ``switched``: the same until the first re-check, then dense for good; the residual is released
  into the next dense gradient as the product does (planner.py, "Switching a tensor").
* ``switched, residual dropped``: the same switch with every residual thrown away (not exact):
  whether the released residual is what hurts.
* ``none``: Horovod alone, dense every step.

Each run records its validation perplexity at 8 points and the median norm of the aggregated
gradient (before clipping to 0.25) over each 10 steps. Writes bench/results/route_switch.json
(cached per arm).
"""
import argparse
import json
import os
import runpy
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from common import ResultCache, launch_metrics  # noqa: E402

EXAMPLE = os.path.join(ROOT, "examples", "pytorch_ptb_lm.py")
OPTIONS = ["--epochs", "1", "--train-fraction", "0.25", "--evals-per-epoch", "8", "--seed", "42"]
ARMS = ["none", "compressed", "switched", "dropped"]
RECHECK = 50  # steps after the first plan to its re-check, the switch


def worker(arm: str, argv: list[str]) -> None:
    """One rank: the example, its planner forced as ``arm`` says, its clip norms recorded."""
    import torch

    sys.path.insert(0, ROOT)
    from hvd_compress.communication import cost, planner, probe

    probe.link = lambda process_set, prefix, nodes=None: cost.Link(0.01)
    planner.RETRIALS, planner.RECHECK, planner.DRIFT = 0, RECHECK, -1.0  # every re-check re-plans
    decide, begin = planner.Planner._decide, planner.Planner._begin_trials

    def compressed(self: planner.Planner) -> bool:
        self.steady = [2.0] + [1.0] * (len(self.plans) - 1)  # the model's best plan measures fastest
        return decide(self)

    def dense_for_good(self: planner.Planner) -> bool:
        if self.report.get("chosen") is None:  # the first trials
            return begin(self)
        if arm == "compressed":
            return False
        self.final_time, self.report["switched_at_step"] = float("inf"), self.step
        changed = self._use(self.plans[0])
        if arm == "dropped":
            for name in self.release:
                self.compressor.memory.pop(name)
            self.release = set()
        return changed

    planner.Planner._decide, planner.Planner._begin_trials = compressed, dense_for_good
    clip, norms = torch.nn.utils.clip_grad_norm_, []

    def recorded(parameters, max_norm, *args, **kwargs):
        norms.append(float(clip(parameters, max_norm, *args, **kwargs)))
        return norms[-1]

    torch.nn.utils.clip_grad_norm_ = recorded
    sys.argv = [EXAMPLE, *argv]
    runpy.run_path(EXAMPLE, run_name="__main__")
    metrics = argv[argv.index("--metrics") + 1]
    if os.environ.get("HOROVOD_RANK") == "0":
        with open(metrics) as f:
            result = json.load(f)
        result["clip_norms"] = [sorted(norms[i:i + 10])[len(norms[i:i + 10]) // 2] for i in range(0, len(norms), 10)]
        with open(metrics, "w") as f:
            json.dump(result, f)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--method", default="adacomp")
    parser.add_argument("--arms", nargs="+", default=ARMS, choices=ARMS)
    parser.add_argument("--worker", choices=ARMS, help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args()
    if args.worker:
        return worker(args.worker, rest)
    cells = {f"lstm|np=2|{args.method if arm != 'none' else 'none'}|{arm}|{' '.join(OPTIONS)}":
             lambda arm=arm: {"method": args.method, "arm": arm, "options": OPTIONS, **launch_metrics(
                 2, [os.path.abspath(__file__), "--worker", arm, "--compression",
                     "none" if arm == "none" else args.method, *OPTIONS], timeout=1800)}
             for arm in args.arms}
    ResultCache("route_switch").sweep(cells, lambda c: " ".join(f"{v:.0f}" for _, v in c["valid_perplexity"]))


if __name__ == "__main__":
    main()
