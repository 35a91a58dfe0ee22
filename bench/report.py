"""Writes the generated tables of README.md and docs/*.md from bench/results/*.json (and the
method table from the registry), so no number is typed by hand.

    .venv/bin/python bench/report.py

Each table sits between ``<!-- bench:NAME -->`` and ``<!-- /bench:NAME -->`` in any of those
files (``documents()``); ``TABLES`` says which results files it reads. A missing results file
leaves its tables as they are (tests/test_docs.py fails on it).

Each table from results ends with its label (``label``): the results file and the commit it was
added on top of (the first parent of the commit that last changed the file, or HEAD while the
file has uncommitted changes: the commit it was measured on, stable when results and docs are
committed together). "The code a results file measures" is ``MEASURES``: the package and the
bench and worker scripts that wrote it. A results file older than that code (a later commit
touched one of those paths) must be declared in ``OLDER`` with what changed, and its label says
so; tests/test_docs.py checks both ways.
"""
import functools
import glob
import os
import re
import statistics
import subprocess
from dataclasses import dataclass
from typing import Callable

import hvd_compress
from common import by_rate, ddp_own, load, longest_run, rate_label
from hvd_compress.kernels.threads import PARALLEL_MIN

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
DOCS = os.path.join(ROOT, "docs")


def _routes(cls: type) -> str:
    """The ``communication=`` values a method's constructor accepts at its defaults, tried on the
    code; a method that takes no ``communication`` shows its one route."""
    from hvd_compress.options import ROUTES

    accepted = []
    for way in dict.fromkeys([*ROUTES, *(r for c in hvd_compress.METHODS.values() for r in c.ROUTES)]):
        try:
            cls(communication=way)
        except (TypeError, ValueError):
            continue
        accepted.append(f"`{way}`")
    return ", ".join(accepted) if accepted else f"{', '.join(cls.ROUTES)} only"


def methods_table(result: dict) -> str:
    """The catalogue from the registry (hvd_compress.methods.METHODS): each method's spec, its
    constructor with every default that differs from the common ones, the routes it accepts,
    its paper and payload."""
    common = {"error_feedback": True, "min_numel": 1024, "communication": "auto", "link_gbit": None}
    lines = ["| spec | class, defaults | `communication=` | paper | what crosses the wire |",
             "|---|---|---|---|---|"]
    for name, cls in hvd_compress.METHODS.items():
        options = cls().options()
        lacks = [k for k in common if k not in options]
        options.pop("link_gbit", None)  # the environment's (HVD_COMPRESS_LINK_GBIT), not a default
        shown = ", ".join(f"{k}={v!r}" for k, v in options.items() if common.get(k, object()) != v)
        takes = f" (takes no {', '.join(f'`{k}`' for k in lacks)})" if lacks else ""
        payload = cls.PAYLOAD.replace("|", "\\|")
        lines.append(f"| `{name}` | `hc.{cls.__name__}({shown})`{takes} | {_routes(cls)} | {cls.PAPER} | {payload} |")
    lines.append("| `none`, `fp16` | Horovod's `Compression.none` / `Compression.fp16` | | | "
                 "unchanged Horovod behaviour |")
    lines += ["", "Every compressor also takes `error_feedback=True`, `min_numel=1024`, "
              "`communication=\"auto\"` and `link_gbit=None` unless its row says otherwise; "
              "`communication=` lists the values its constructor accepts (the first is its default). "
              "Generated from `hvd_compress.METHODS` by bench/report.py."]
    return "\n".join(lines)


def defaults_line(name: str) -> str:
    """One method's constructor with every default, and the routes it accepts, from the code."""
    cls = hvd_compress.METHODS[name]
    options = {**cls().options(), **({"link_gbit": None} if "link_gbit" in cls().options() else {})}
    common = ("error_feedback", "min_numel", "communication", "link_gbit")
    ordered = [k for k in options if k not in common] + [k for k in common if k in options]
    call = ", ".join(f"{k}={options[k]!r}" for k in ordered)
    return (f"Defaults: `hc.{cls.__name__}()` is `hc.{cls.__name__}({call})`; `communication=` "
            f"accepts {_routes(cls)}; `from_spec(\"{name}\")` (generated from the code).")


def kernels_table(result: dict) -> str:
    sizes = list(result["sizes"])
    head = "| compress + residual update | " + " | ".join(
        f"{int(n) / 1e6:g}M ms | vs copy_ | vs torch" for n in sizes) + " |"
    lines = [head, "|---" * (1 + 3 * len(sizes)) + "|"]
    references = {"TopK": "torch topk 1% + gather", "OneBit": "torch one-bit (masked means)",
                  "QSGD": "torch QSGD (bucket norms, int8)", "TernGrad": "torch TernGrad (int8)",
                  "u8bit": "torch u8bit (bucketize)", "Natural": "torch natural (frexp)",
                  "finite check + add, fused": "finite check + add, torch"}
    for label in result["sizes"][sizes[0]]["compress_ms"]:
        cells = []
        for n in sizes:
            rows = result["sizes"][n]["compress_ms"]
            ms = rows[label]
            ref = next((rows[r] for key, r in references.items() if label.startswith(key)), None)
            cells += [f"{ms:.2f}", f"{ms / rows['copy_ (bandwidth floor)']:.1f}x",
                      f"{ref / ms:.1f}x faster" if ref else ""]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", f"| decode + sum of {result['aggregated_ranks']} payloads | "
              + " | ".join(f"{int(n) / 1e6:g}M ms | payload bytes" for n in sizes) + " |",
              "|---" * (1 + 2 * len(sizes)) + "|"]
    for label, value in result["sizes"][sizes[0]]["decode_ms"].items():
        if label.endswith("payload bytes"):
            continue
        cells = []
        for n in sizes:
            d = result["sizes"][n]["decode_ms"]
            cells += [f"{d[label]:.2f}", f"{int(d[label + ' payload bytes']):,}"]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    m = result["machine"]
    lines += ["", f"Measured by `bench/kernels.py` on {m['cpus']} CPUs ({m['processor']}), "
              f"torch using {result['torch_threads']} threads; medians of 7 runs. Rows without "
              f"\"serial build\" take the parallel kernel builds from {PARALLEL_MIN:,} (2^"
              f"{PARALLEL_MIN.bit_length() - 1}) elements on; a rank that fills its host runs the "
              "serial ones."]
    return "\n".join(lines)


def wire_bytes_table(result: dict) -> str:
    groups = dict.fromkeys((c["model"], c["rate_mbit"]) for c in result["cells"].values())
    return "\n\n".join(_wire_bytes_of(result, model, rate) for model, rate in groups)


def _wire_bytes_of(result: dict, model: str, rate: float) -> str:
    cells = [c for c in result["cells"].values() if (c["model"], c["rate_mbit"]) == (model, rate)]
    sizes = sorted({c["np"] for c in cells})
    dense = {c["np"]: c["tx_bytes_per_step"] for c in cells if c["method"] == "none"}
    lines = ["| method | " + " | ".join(f"np={p} MB sent/step | fewer than dense | samples/s"
                                        for p in sizes) + " | np={0} / np={1} bytes |".format(sizes[-1], sizes[0]),
             "|---" * (2 + 3 * len(sizes)) + "|"]
    for method in dict.fromkeys(c["method"] for c in cells):
        row, sent = [], {}
        for p in sizes:
            cell = next((c for c in cells if c["method"] == method and c["np"] == p), None)
            if cell is None:
                row += ["", "", ""]
                continue
            sent[p] = cell["tx_bytes_per_step"]
            row += [f"{sent[p] / 1e6:.2f}", f"{dense[p] / sent[p]:.1f}x" if p in dense else "",
                    f"{cell['samples_per_s']:.1f}"]
        growth = f"{sent[sizes[-1]] / sent[sizes[0]]:.2f}x" if len(sent) == len(sizes) else ""
        lines.append(f"| `{method}` | " + " | ".join(row) + f" | {growth} |")
    lines += ["", f"Model `{model}`, links at {rate:g} Mbit/s, batch {cells[0].get('batch_size', 32)} "
              "per worker; bytes are each worker's interface tx counter (mean over workers), by "
              "`bench/wire_bytes.py`. The workers of a cell share 2 cores: compare samples/s within a "
              "column, not across world sizes."]
    return "\n".join(lines)


SCALE_FEWER_BYTES = {"topk:ratio=0.01": 40, "onebit": 25, "adacomp": 10}


def scale_targets_table(result: dict) -> str:
    """Issue 11's targets, per model, from the cells of bench/wire_bytes.py."""
    cells = {(c["model"], c["np"], c["method"]): c for c in result["cells"].values()}
    largest = max(c["np"] for c in result["cells"].values())
    lines = ["| model | method | np={0} / np=2 bytes (<= 1.3x) | fewer bytes than dense at np={0} | "
             "samples/s vs uncompressed at np={0} (>= 5x) | auto vs best forced route, np=4 / np={0} "
             "(>= 0.95x) |".format(largest), "|---" * 6 + "|"]
    for model in dict.fromkeys(c["model"] for c in result["cells"].values()):
        for method, fewer in SCALE_FEWER_BYTES.items():
            top, two, dense = (cells.get((model, largest, method)), cells.get((model, 2, method)),
                               cells.get((model, largest, "none")))
            if not (top and two and dense):
                continue
            growth = top["tx_bytes_per_step"] / two["tx_bytes_per_step"]
            saved = dense["tx_bytes_per_step"] / top["tx_bytes_per_step"]
            speed = top["samples_per_s"] / dense["samples_per_s"]
            auto = []
            for p in (4, largest):
                forced = [c["samples_per_s"] for (m, q, meth), c in cells.items()
                          if (m, q) == (model, p) and meth.startswith(method) and "communication=" in meth]
                if forced and (model, p, method) in cells:
                    auto.append(_mark(cells[model, p, method]["samples_per_s"] / max(forced), 0.95))
            lines.append(f"| {model} | `{method}` | {growth:.2f}x {'met' if growth <= 1.3 else '**not met**'} | "
                         + (_mark(saved, fewer) if model == "widemlp" else f"{saved:.3g}x")
                         + f" | {_mark(speed, 5)} | {' / '.join(auto)} |")
    return "\n".join(lines)


def cost_model_table(result: dict) -> str:
    """Predicted / measured, per method and cell, for bytes and for communication time."""
    lines = []
    for kind, target, what in [("bytes", 0.10, "bytes sent per worker and step"),
                               ("seconds", 0.25, "communication time per step at 100 Mbit/s")]:
        rows = [r for r in result["check"] if r["kind"] == kind]
        columns = list(dict.fromkeys((r["model"], r["np"]) for r in rows))
        lines += [f"| {what}: predicted / measured | " + " | ".join(f"{m} np={p}" for m, p in columns) + " |",
                  "|---" * (1 + len(columns)) + "|"]
        for method in dict.fromkeys(r["method"] for r in rows):
            cells = []
            for column in columns:
                r = next((r for r in rows if (r["model"], r["np"], r["method"]) == (*column, method)), None)
                if r is None or r["measured"] <= 0:
                    cells.append("" if r is None else "(not measurable)")
                    continue
                ratio = r["predicted"] / r["measured"]
                cells.append(f"{ratio:.2f}" + ("" if abs(ratio - 1) <= target else " *"))
            lines.append(f"| `{method}` | " + " | ".join(cells) + " |")
        lines.append("")
    lines.append(f"Per-collective overhead {result['overhead_s'] * 1e6:.0f} us and per-round latency "
                 f"{result['latency_s'] * 1e6:.0f} us, fitted by `bench/cost_model.py fit`; * marks a "
                 "cell outside the target (bytes within 10%, time within 25%). Measured time is the "
                 "step time at 100 Mbit/s less the unthrottled one, from `bench/results/throughput.json`.")
    return "\n".join(lines)


def small_tensors_table(result: dict) -> str:
    cells = sorted(result["cells"].values(), key=lambda c: c["min_numel"])
    lines = ["| min_numel | samples/s | MB sent/step |", "|---|---|---|"]
    lines += [f"| {c['min_numel']} | {c['samples_per_s']:.1f} | {c['tx_bytes_per_step'] / 1e6:.2f} |"
              for c in cells]
    lines += ["", f"ResNet-18, np=2, `{cells[0]['method']}`, links at {cells[0]['rate_mbit']:g} "
              "Mbit/s, by `bench/small_tensors.py`."]
    return "\n".join(lines)


def _mark(value: float, target: float) -> str:
    return f"{value:.3g}x {'met' if value >= target else '**not met**'}"


def _ours(method: str) -> bool:
    """An hvd_compress compressor, not Horovod's own nor a DDP hook."""
    return method not in ("none", "fp16") and not method.startswith("ddp:")


def _throughput_cells(result: dict) -> dict:
    """(model, np, rate, method) -> cell, in table order whatever order the cells were measured
    in: models, world sizes and link rates ascending; Horovod's own methods and our first ones,
    then the rest of our catalogue as measured, then DDP's hooks."""
    first = ["none", "fp16", "topk:ratio=0.01", "onebit", "adacomp", "powersgd:rank=1"]

    def order(key: tuple) -> tuple:
        method = key[3]
        rank = (0, first.index(method)) if method in first else (2, 0) if method.startswith("ddp:") else (1, 0)
        return key[0], key[1], by_rate(key[2]), rank

    launches: dict[tuple, list[dict]] = {}
    for c in result["cells"].values():
        launches.setdefault((c["model"], c["np"], c["rate_mbit"], c["method"]), []).append(c)
    cells = {key: median_launch(runs) for key, runs in launches.items()}
    return dict(sorted(cells.items(), key=lambda item: order(item[0])))


def median_launch(runs: list[dict]) -> dict:
    """A cell launched ``--repeats`` times: its median launch by samples/s (the lower of the
    middle two for an even count), with every launch's samples/s in ``launches``."""
    ranked = sorted(runs, key=lambda c: c["samples_per_s"])
    chosen = ranked[(len(ranked) - 1) // 2]
    return {**chosen, "launches": [c["samples_per_s"] for c in ranked]} if len(runs) > 1 else chosen


def throughput_table(result: dict) -> str:
    cells = _throughput_cells(result)
    models = list(dict.fromkeys(k[0] for k in cells))
    sizes = sorted({k[1] for k in cells})
    rates = sorted({k[2] for k in cells}, key=by_rate)
    methods = list(dict.fromkeys(k[3] for k in cells))
    out = []
    for model in models:
        columns = [(p, r) for p in sizes for r in rates]
        lines = ["| method | " + " | ".join(f"np={p} {rate_label(r)}" for p, r in columns)
                 + " | " + " | ".join(f"np={p} MB sent/step" for p in sizes) + " |",
                 "|---" * (1 + len(columns) + len(sizes)) + "|"]
        for method in methods:
            row = []
            for p, r in columns:
                cell, dense = cells.get((model, p, r, method)), cells.get((model, p, r, "none"))
                row.append("" if cell is None else f"{cell['samples_per_s']:.1f}" + (
                    f" ({cell['samples_per_s'] / dense['samples_per_s']:.1f}x)" if dense else ""))
            for p in sizes:
                cell = cells.get((model, p, rates[0], method))
                row.append("" if cell is None else f"{cell['tx_bytes_per_step'] / 1e6:.2f}")
            lines.append(f"| `{method}` | " + " | ".join(row) + " |")
        batch = next(c["batch_size"] for k, c in cells.items() if k[0] == model)
        lines += ["", f"`{model}`, batch {batch} per worker: samples/s of all workers (and "
                  f"the ratio to uncompressed Horovod in the same cell); MB sent per worker and "
                  f"step at {rate_label(rates[0])} (interface counters)."]
        out.append("\n".join(lines))
    return "\n\n".join(out)


def auto_targets_table(result: dict) -> str:
    """Issue 29's first target, cell by cell: each compressor's defaults (``auto`` measured and
    tried, no link rate told) against uncompressed Horovod in the same cell of the same sweep."""
    cells = {k: c for k, c in _throughput_cells(result).items() if c.get("plan") is not None}
    columns = sorted({(k[1], k[2]) for k in cells}, key=lambda pr: (pr[0], by_rate(pr[1])))
    lines = ["| model, method | " + " | ".join(f"np={p} {rate_label(r)}" for p, r in columns) + " |",
             "|---" * (1 + len(columns)) + "|"]
    worst = None
    for model, method in dict.fromkeys((k[0], k[3]) for k in cells):
        if not _ours(method):
            continue
        row = []
        for p, r in columns:
            cell, dense = cells.get((model, p, r, method)), cells.get((model, p, r, "none"))
            if cell is None or dense is None:
                row.append("")
                continue
            ratio = cell["samples_per_s"] / dense["samples_per_s"]
            worst = ratio if worst is None else min(worst, ratio)
            chosen = "dense" if cell["plan"].get("chosen") == 0 else "compressed"
            spread = (f"; launches {_span(cell['launches'])} vs {_span(dense['launches'])} samples/s"
                      if ratio < 0.97 and "launches" in cell and "launches" in dense else "")
            row.append(f"{_mark(ratio, 0.97)} ({chosen}{spread})")
        lines.append(f"| {model}, `{method}` | " + " | ".join(row) + " |")
    if worst is not None:
        repeats = sorted({len(c.get("launches", [0])) for c in cells.values()})
        spread = max((max(c["launches"]) / min(c["launches"]) - 1 for c in cells.values()
                      if c["method"] == "none" and "launches" in c), default=None)
        counts = " or ".join(str(n) for n in repeats)
        launched = ("one launch a cell" if repeats == [1] else
                    f"medians of {counts} launches a cell, the methods taking turns"
                    + (f" (`none`'s own launches spread by up to {spread:.0%} in one cell)" if spread else ""))
        lines += ["", f"Samples/s over `none`'s in the same cell (target >= 0.97x, every cell), and "
                  f"the plan `auto` made final (dense: all tensors as Horovod sends them); "
                  f"{launched}. Worst cell: {worst:.3g}x. Defaults only: no `link_gbit`, nothing told."]
    return "\n".join(lines)


def _span(values: list[float]) -> str:
    return f"{min(values):.0f}-{max(values):.0f}"


def planning_table(result: dict) -> str:
    """What ``auto`` measured, and what measuring and trying cost, per cell (medians over the
    cell's methods)."""
    import statistics

    cells = [c for c in result["cells"].values() if c.get("plan", {}).get("measured")]
    groups: dict = {}
    for c in cells:
        groups.setdefault((c["model"], c["np"], c["rate_mbit"]), []).append(c)
    lines = ["| model | np | link | measured Gbit/s | overhead ms | probe s | steps until final | "
             "seconds until final | launches that tried again |", "|---|---|---|---|---|---|---|---|---|"]
    for (model, p, rate), group in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1], by_rate(kv[0][2]))):
        def median(get):
            return statistics.median(get(c["plan"]) for c in group)
        lines.append(f"| {model} | {p} | {rate_label(rate)} | {median(lambda q: q['measured']['gbit']):.3g} | "
                     f"{1e3 * median(lambda q: q['measured']['overhead_s']):.2f} | "
                     f"{median(lambda q: q['probe_s']):.2f} | "
                     f"{median(lambda q: q['planning_steps']):.0f} | {median(lambda q: q['planned_s']):.1f} | "
                     f"{sum(1 for c in group if c['plan'].get('retrials'))} of {len(group)} |")
    lines += ["", "Medians over the cell's compressors (and launches). Steps until final: the dense first step, "
              "the probe at its end, then a block of 4 to 64 steps for each candidate plan and 20 "
              "steps confirming the fastest (no trials, final at step 1, where the model predicted "
              "no plan faster than dense). Launches that tried again: the final plan's first steps "
              "contradicted the trials, which ran again (docs/design.md, `auto`). "
              "Seconds until final include every step the trials ran, slower plans too. An "
              "unthrottled link between namespaces measures as fast as the machine copies memory."]
    return "\n".join(lines)


def throughput_targets_table(result: dict) -> str:
    """Issue 5's targets, np=2, ResNet-18: checked for each hvd_compress compressor."""
    cells = _throughput_cells(result)

    def ratio(rate, method, baseline):
        a, b = cells.get(("resnet18", 2, rate, method)), cells.get(("resnet18", 2, rate, baseline))
        return None if a is None or b is None else a["samples_per_s"] / b["samples_per_s"]

    targets = [(100, "none", 5.0), (100, "fp16", 2.5), (1000, "none", 1.5), (None, "none", 0.9)]
    lines = ["| compressor | " + " | ".join(f"{rate_label(r)} vs `{b}` (>= {t:g}x)" for r, b, t in targets)
             + " |", "|---" * (1 + len(targets)) + "|"]
    for method in dict.fromkeys(k[3] for k in cells):
        if not _ours(method):
            continue
        values = [ratio(r, method, b) for r, b, _ in targets]
        lines.append(f"| `{method}` | " + " | ".join(
            "not measured" if v is None else _mark(v, t) for v, (_, _, t) in zip(values, targets)) + " |")
    return "\n".join(lines)


def powersgd_table(result: dict) -> str:
    """Per cell, the fastest hvd_compress compressor against the fastest torch DDP hook."""
    cells = _throughput_cells(result)
    lines = ["| model | np | link | fastest hvd_compress | samples/s | fastest DDP hook | samples/s "
             "| hvd_compress / DDP |", "|---" * 8 + "|"]
    for key in dict.fromkeys(k[:3] for k in cells):
        ours = [c for k, c in cells.items() if k[:3] == key and _ours(k[3])]
        theirs = [c for k, c in cells.items() if k[:3] == key and k[3].startswith("ddp:")]
        if not ours or not theirs:
            continue
        a = max(ours, key=lambda c: c["samples_per_s"])
        b = max(theirs, key=lambda c: c["samples_per_s"])
        lines.append(f"| {key[0]} | {key[1]} | {rate_label(key[2])} | `{a['method']}` | "
                     f"{a['samples_per_s']:.1f} | `{b['method']}` | {b['samples_per_s']:.1f} | "
                     f"{a['samples_per_s'] / b['samples_per_s']:.2f}x |")
    return "\n".join(lines)


def powersgd_rank_table(result: dict) -> str:
    """Our PowerSGD against torch DDP's PowerSGD hook at the same rank (1), cell by cell."""
    cells = _throughput_cells(result)
    ours, theirs = "powersgd:rank=1", "ddp:powersgd:1"
    lines = [f"| model | np | link | `{ours}` samples/s | `{theirs}` samples/s | ours / DDP (>= 1x) "
             "| MB sent/step, ours / DDP |", "|---" * 7 + "|"]
    for key in dict.fromkeys(k[:3] for k in cells):
        a, b = cells.get((*key, ours)), cells.get((*key, theirs))
        if a is None or b is None:
            continue
        lines.append(f"| {key[0]} | {key[1]} | {rate_label(key[2])} | {a['samples_per_s']:.1f} | "
                     f"{b['samples_per_s']:.1f} | {_mark(a['samples_per_s'] / b['samples_per_s'], 1.0)} | "
                     f"{a['tx_bytes_per_step'] / 1e6:.2f} / {b['tx_bytes_per_step'] / 1e6:.2f} |")
    return "\n".join(lines)


def convergence_table(result: dict) -> str:
    cells = longest_run(result)
    sizes = sorted({c["np"] for c in cells})
    final = {(c["np"], c["method"]): c["test_accuracy"][-1][1] for c in cells}
    lines = ["| method | error feedback | optimizer | " + " | ".join(f"np={p} test accuracy | vs `none`" for p in sizes)
             + " | within 0.5 points of `none` |", "|---" * (4 + 2 * len(sizes)) + "|"]
    for method in dict.fromkeys(c["method"] for c in cells):
        cell = next(c for c in cells if c["method"] == method)
        feedback = cell["error_feedback"]
        row, met = [], []
        for p in sizes:
            if (p, method) not in final:
                row += ["", ""]
                continue
            delta = final[(p, method)] - final.get((p, "none"), float("nan"))
            row += [f"{final[(p, method)]:.2f}%", f"{delta:+.2f}"]
            met.append(delta >= -0.5)
        ablation = feedback is None or "error_feedback=false" in method
        target = "n/a" if ablation else "met" if all(met) else "**not met**"
        optimizer = cell.get("optimizer", "example's")
        optimizer = "SGD, lr 0.01, momentum 0.9" if optimizer == "example's" else f"`{optimizer}`"
        lines.append(f"| `{method}` | {'-' if feedback is None else 'on' if feedback else 'off'} | {optimizer} | "
                     + " | ".join(row) + f" | {target} |")
    c = cells[0]
    lines += ["", f"LeNet-5 on MNIST, {c['epochs']} epochs, seed {c['seed']}, batch 64 per worker, "
              "learning rates per worker (scaled by the world size), by `bench/convergence.py`; the "
              "target applies to every compressor at its defaults, not to the error-feedback ablations."]
    return "\n".join(lines)


def compression_table(result: dict) -> str:
    """Each compressor's measured compression of LeNet-5's compressed layers, from the
    convergence runs."""
    cells = [c for c in longest_run(result) if c.get("per_tensor") and "error_feedback=false" not in c["method"]]
    sizes = sorted({c["np"] for c in cells})
    lines = ["| method | " + " | ".join(f"np={p}: fewer bytes than fp32" for p in sizes) + " |",
             "|---" * (1 + len(sizes)) + "|"]
    for method in dict.fromkeys(c["method"] for c in cells):
        row = []
        for p in sizes:
            cell = next((c for c in cells if (c["np"], c["method"]) == (p, method)), None)
            layers = cell["per_tensor"].values() if cell else []
            row.append(f"{sum(l['dense_bytes'] for l in layers) / sum(l['sent_bytes'] for l in layers):.1f}x"
                       if cell else "")
        lines.append(f"| `{method}` | " + " | ".join(row) + " |")
    lines += ["", "Bytes rank 0 handed to Horovod for the layers it compressed (headers included; two-phase "
              "counts both phases), over what dense fp32 would have sent, in the convergence runs "
              "below (LeNet-5 on MNIST, 3 epochs)."]
    return "\n".join(lines)


# the paper's bins: 50 elements for convolutions, 500 for fully connected and recurrent layers
PAPER_ADACOMP = {"conv": "about 40x", "fc": "about 200x", "LSTM": "about 200x"}


def adacomp_layers_table(result: dict) -> str:
    cells = [c for c in longest_run(result) if c["method"] == "adacomp" and c.get("per_tensor")]
    return _adacomp_layers(cells, lambda layer: "conv" if layer.startswith("conv") else "fc",
                           "Not measured yet: run `bench/convergence.py`.")


def _adacomp_layers(cells: list[dict], kind, missing: str) -> str:
    """AdaComp's compression per layer in ``cells`` (one column each), beside its paper's."""
    if not cells:
        return missing
    lines = ["| layer | " + " | ".join(f"np={c['np']} fewer bytes than fp32" for c in cells)
             + " | paper (Chen et al. 2018) |", "|---" * (2 + len(cells)) + "|"]
    for layer in cells[0]["per_tensor"]:
        lines.append(f"| `{layer}` | " + " | ".join(
            f"{c['per_tensor'][layer]['dense_bytes'] / c['per_tensor'][layer]['sent_bytes']:.1f}x"
            for c in cells) + f" | {PAPER_ADACOMP[kind(layer)]} ({kind(layer)}) |")
    return "\n".join(lines)


def ptb_adacomp_layers_table(result: dict) -> str:
    from time_to_accuracy import SEED

    cells = sorted((c for c in _time_to_accuracy_runs(result) if c["workload"] == "ptb" and c["seed"] == SEED
                    and c["method"] == "adacomp" and c["rate_mbit"] == 100), key=lambda c: c["np"])
    return _adacomp_layers(cells, lambda layer: "LSTM" if layer.startswith("lstm.") else "fc",
                           "Not measured yet: run `bench/time_to_accuracy.py`.")


def _final(s: dict, digits: int) -> str:
    """A method's final quality in a cell: the median, and the range where it had several runs."""
    spread = f" [{s['low']:.{digits}f}-{s['high']:.{digits}f}, {s['runs']} runs]" if s["runs"] > 1 else ""
    return f"{s['final']:.{digits}f}{spread}"


def ptb_convergence_table(result: dict) -> str:
    """Final validation perplexity of each method on PTB at 100 Mbit/s (median over its seeds)
    against uncompressed Horovod's in the same cell, with issue 14's targets for the compressors
    with error feedback (within 3%; TopK 0.1% within 5%)."""
    from time_to_accuracy import summary, unigram_perplexity

    runs = [c for c in _time_to_accuracy_runs(result) if c["workload"] == "ptb" and c["rate_mbit"] == 100]
    sizes = sorted({c["np"] for c in runs})
    cells = {p: [c for c in runs if c["np"] == p] for p in sizes}
    lines = ["| method | error feedback | " + " | ".join(f"np={p} perplexity | vs `none`" for p in sizes)
             + " | final perplexity vs `none` |", "|---" * (3 + 2 * len(sizes)) + "|"]
    for method in dict.fromkeys(c["method"] for c in runs):
        row, growth = [], []
        for p in sizes:
            mine, dense = summary(method, cells[p]), summary("none", cells[p])
            if mine is None or dense is None:
                row += ["", ""]
                continue
            growth.append(mine["final"] / dense["final"] - 1)
            row += [_final(mine, 1), f"{100 * growth[-1]:+.1f}%"]
        feedback = _ours(method) and hvd_compress.from_spec(method).error_feedback
        limit = 0.05 if method == "topk:ratio=0.001" else 0.03
        target = "n/a" if not feedback else f"<= +{100 * limit:g}%: " + (
            "met" if max(growth) <= limit else "**not met**") + ("" if len(growth) == len(sizes) else
                                                                  " (one world size measured)")
        lines.append(f"| `{method}` | {'on' if feedback else 'off' if _ours(method) else '-'} | "
                     + " | ".join(row) + f" | {target} |")
    if not runs:
        return "\n".join(lines)
    options = runs[0]["options"]
    fraction = float(options[options.index("--train-fraction") + 1]) if "--train-fraction" in options else 1.0
    lines += ["", f"Word frequencies alone (a unigram model of the training text these runs use, add-one "
              f"smoothed) give a validation perplexity of {unigram_perplexity(fraction):.1f}."]
    return "\n".join(lines)


def _time_to_accuracy_runs(result: dict) -> list[dict]:
    """The full sweep's runs, or --quick's where the full sweep has none for a workload."""
    runs = list(result["cells"].values())
    full = {c["workload"] for c in runs if not c["quick"]}
    return [c for c in runs if c["quick"] == (c["workload"] not in full)]


def _cell(runs: list[dict], workload: str, p: int, rate: float) -> list[dict]:
    return [c for c in runs if (c["workload"], c["np"], c["rate_mbit"]) == (workload, p, rate)]


def time_to_accuracy_table(result: dict) -> str:
    from time_to_accuracy import summary

    runs = _time_to_accuracy_runs(result)
    out = []
    for workload in dict.fromkeys(c["workload"] for c in runs):
        cells = [c for c in runs if c["workload"] == workload]
        columns = sorted({(c["np"], c["rate_mbit"]) for c in cells}, key=lambda k: (by_rate(k[1]), -k[0]))
        lines = ["| method | " + " | ".join(f"np={p} {rate_label(r)}: s to target | final" for p, r in columns)
                 + " |", "|---" * (1 + 2 * len(columns)) + "|"]
        for method in dict.fromkeys(c["method"] for c in cells):
            row = []
            for p, r in columns:
                here = _cell(cells, workload, p, r)
                mine, dense = summary(method, here), summary("none", here)
                if mine is None:
                    row += ["", ""]
                    continue
                base = dense and dense["seconds"]
                row += ["not reached" if mine["seconds"] is None else f"{mine['seconds']:.0f}" + (
                    f" ({base / mine['seconds']:.1f}x)" if base else ""), _final(mine, 2)]
            lines.append(f"| `{method}` | " + " | ".join(row) + " |")
        c = cells[0]
        what = ("test accuracy (%); target 98.0%" if workload == "mnist" else
                "validation perplexity; target: within 5% of the median of what `none` ends with in the same cell")
        lines += ["", f"{workload.upper()}, `{' '.join(c['options'])}`: training seconds to the target "
                  f"(evaluation excluded; in brackets, how many times sooner than `none`) and the final "
                  f"{what}. Where a method ran with several seeds, both are medians over them (a run "
                  f"that never reached the target counts as infinitely late) and the finals' range "
                  f"follows in brackets; by `bench/time_to_accuracy.py`."]
        out.append("\n".join(lines))
    return "\n\n".join(out)


def time_to_accuracy_targets_table(result: dict) -> str:
    """Issue 14's time targets for each hvd_compress compressor at its defaults (medians over
    seeds where a method ran with several)."""
    from time_to_accuracy import summary

    runs = _time_to_accuracy_runs(result)

    def sooner(method, workload, p, rate, baseline, target):
        here = _cell(runs, workload, p, rate)
        a, b = summary(method, here), summary(baseline, here)
        if a is None or b is None:
            return "not measured"
        if a["seconds"] is None:
            return "never reached: **not met**"
        return "baseline never reached: met" if b["seconds"] is None else _mark(b["seconds"] / a["seconds"], target)

    lines = ["| compressor | 100 Mbit/s np=4 sooner than `none` (>= 3x), MNIST / PTB | 100 Mbit/s np=4 "
             "sooner than `fp16` (>= 1.5x), MNIST / PTB | 1 Gbit/s sooner than `none` (>= 1x), np=2 / "
             "np=4, MNIST / PTB |",
             "|---" * 4 + "|"]
    for method in dict.fromkeys(c["method"] for c in runs):
        if not _ours(method) or "error_feedback=false" in method:
            continue
        cells = [" / ".join(sooner(method, w, 4, 100, base, target) for w in ("mnist", "ptb"))
                 for base, target in (("none", 3), ("fp16", 1.5))]
        cells.append(" / ".join(sooner(method, w, p, 1000, "none", 1) for p in (2, 4) for w in ("mnist", "ptb")))
        lines.append(f"| `{method}` | " + " | ".join(cells) + " |")
    peer = [f"{w}: fastest hvd_compress {_against_ddp(runs, w)}" for w in ("mnist", "ptb")]
    lines += ["", "Against torch DDP's PowerSGD hook (rank 1) at 100 Mbit/s, np=4: " + "; ".join(peer) + "."]
    return "\n".join(lines)


def _against_ddp(runs: list[dict], workload: str) -> str:
    """How many times sooner than DDP's PowerSGD hook our fastest compressor reached the target."""
    from time_to_accuracy import summary

    here = _cell(runs, workload, 4, 100)
    times = {m: summary(m, here)["seconds"] for m in dict.fromkeys(c["method"] for c in here)}
    ours = [(t, m) for m, t in times.items() if _ours(m) and "error_feedback=false" not in m and t is not None]
    peer = times.get("ddp:powersgd:1")
    if not ours or peer is None:
        return "not measured (or no run reached the target)"
    best, method = min(ours)
    return f"`{method}`, {peer / best:.2f}x sooner ({'met' if best <= peer else '**not met**'})"


def breakdown_table(result: dict) -> str:
    from breakdown import medians

    cells = medians(result)
    lines = ["| model | np | link | method | step ms | compress ms | decode ms | wait ms | compress + "
             "decode vs uncompressed step (<= 5%) | step vs uncompressed | step vs `ddp:powersgd:1` |",
             "|---" * 11 + "|"]
    for (model, p, rate, method), c in cells.items():
        dense = cells.get((model, p, rate, "none"))
        ddp = cells.get((model, p, rate, "ddp:powersgd:1"))
        head = f"| {model} | {p} | {rate_label(rate)} | `{method}` | {c['step_ms']:.0f} |"
        if method == "none" or method.startswith("ddp:"):
            vs = f"{dense['step_ms'] / c['step_ms']:.2f}x" if dense else ""
            lines.append(f"{head} | | | | {vs} | |")
            continue
        ph = c["phases"]
        path = ph.get("compress", 0) + ph.get("decode", 0)
        share = f"{100 * path / dense['step_ms']:.1f}%" + (" met" if path <= 0.05 * dense["step_ms"] else
                                                           " **not met**") if dense else ""
        speedup = dense["step_ms"] / c["step_ms"] if dense else None
        target = _step_target(model, p, rate)
        verdict = "" if speedup is None or target is None else (
            f" (>= {target}x: {'met' if speedup >= target else '**not met**'})")
        lines.append(f"{head} {ph.get('compress', 0):.1f} | {ph.get('decode', 0):.1f} | "
                     f"{ph.get('wait', 0):.1f} | {share} | "
                     + (f"{speedup:.2f}x{verdict}" if speedup else "") + " | "
                     + (f"{ddp['step_ms'] / c['step_ms']:.2f}x" if ddp else "") + " |")
    any_cell = next(iter(result["cells"].values()))
    lines += ["", f"Batch {any_cell['batch_size']} per worker, medians of "
              f"{min(c['repeats'] for c in cells.values())} runs per cell (repeats interleaved in one "
              "sweep), milliseconds per step, mean over the workers, by `bench/breakdown.py`. \"step vs "
              "X\" is X's step time over this one's (> 1: faster); the targets are issue 12's "
              "(unthrottled: 0.97x on ResNet-18, 0.9x on WideMLP; 1 Gbit/s, ResNet-18, np=2: 1.5x)."]
    return "\n".join(lines)


def memory_table(result: dict) -> str:
    """Issue 30: each method's peak resident memory over `none`, per rank, against its budget."""
    from memory import MB, budget, over_none

    cells = list(result["cells"].values())
    lines = ["| method | rank 0 over `none`: MB (gradients) | rank 1 over `none`: MB (gradients) | payload, "
             "rank 0 / 1: MB | budget: gradients + payloads + slack, MB | within budget | TopK exact "
             "selections, rank 0 / 1 |", "|---" * 7 + "|"]
    for cell in cells:
        if cell["method"] == "none":
            continue
        gradient = cell["ranks"][0]["gradient_bytes"]
        over = over_none(result, cell)
        row = ["" if extra is None else f"{extra / MB:.0f} ({extra / gradient:.2f})" for extra in over]
        row.append(" / ".join("-" if r["payload_bytes_per_step"] is None else
                              f"{r['payload_bytes_per_step'] / MB:.1f}" for r in cell["ranks"]))
        allowed = budget(cell)
        if allowed is None:
            row += ["Horovod's own", "-"]
        else:
            row += [f"{allowed[1]} = {allowed[0] / MB:.0f}",
                    "" if None in over else "met" if max(over) <= allowed[0] else "**not met**"]
        row.append(" / ".join(str(r["exact_selections"]) for r in cell["ranks"]))
        lines.append(f"| `{cell['method']}` | " + " | ".join(row) + " |")
    c = next((c for c in cells if c["method"] == "none"), cells[0])
    dense = " / ".join(f"{(r['peak_rss'] - r['base_rss']) / MB:.0f}" for r in c["ranks"])
    gradient = c["ranks"][0]["gradient_bytes"]
    lines += ["", f"One `nn.Linear({c['cols']}, {c['rows']})` ({c['rows'] * c['cols'] / 1e6:g}M elements: a "
              f"{gradient / MB:.1f} MB fp32 gradient), np={c['np']} on gloo over loopback, plain SGD, batch "
              f"{c['batch_size']} per worker, {c['steps']} steps after a warm-up of the same size; by "
              "`bench/memory.py`. A rank's peak is the high-water mark of its resident memory during the "
              "steps above its RSS just before them (parameter and imports included there); `none`'s is "
              f"{dense} MB (rank 0 / 1), the gradient itself. Rank 0's input is sparse (under 1% of its "
              "gradient nonzero), which sends TopK's sampled selection to the exact one there every step; "
              "rank 1's is Gaussian. Payload: the largest a rank sent for the layer in a step. The budget: "
              "the residual (1 gradient), DGC's velocity or Signum's momentum (+1), the payloads a rank "
              "holds at once (its encoded parts and its framed payload, at the larger rank's size, and "
              "every rank's once gathered) and 1/16 of a gradient for masks and bookkeeping."]
    return "\n".join(lines)


def _step_target(model: str, workers: int, rate: float | None) -> float | None:
    """Issue 12's step-time target for a compressor against uncompressed Horovod."""
    if rate is None:
        return 0.97 if model == "resnet18" else 0.9
    return 1.5 if (model, workers, rate) == ("resnet18", 2, 1000) else None


#: (module, constant, what it sets): the constants the design notes name, read from the code
CONSTANTS = [
    ("hvd_compress.compressor", "Compressor(min_numel=...)", "default: gradients with fewer elements go dense"),
    ("hvd_compress.communication.framing", "HEADER_BYTES", "bytes of each payload's header (length and tag)"),
    ("hvd_compress.communication.fusion", "BUCKET_BYTES", "dense gradient bytes per bucket of alltoalls"),
    ("hvd_compress.communication.probe", "SMALL", "elements of the smaller gradient the CPU probe encodes"),
    ("hvd_compress.communication.probe", "LARGE", "elements of the larger one"),
    ("hvd_compress.communication.probe", "BULK_BYTES", "bytes of the link probe's bulk allreduce"),
    ("hvd_compress.communication.probe", "REPEATS", "timed repeats of each probe (median kept)"),
    ("hvd_compress.communication.planner", "MARGIN", "how much faster than dense a plan must be predicted "
     "to be tried, and measured to be kept"),
    ("hvd_compress.communication.planner", "MIN_BLOCK", "fewest steps a candidate plan runs in its trial"),
    ("hvd_compress.communication.planner", "BLOCK_S", "seconds a trial block runs at least (slowest rank)"),
    ("hvd_compress.communication.planner", "MAX_BLOCK", "most steps of a trial block"),
    ("hvd_compress.communication.planner", "RECHECK", "steps between drift checks of the final plan"),
    ("hvd_compress.communication.planner", "WINDOW", "steps whose median a drift check compares"),
    ("hvd_compress.communication.planner", "DRIFT", "relative drift that runs the trials again"),
    ("hvd_compress.communication.cost", "DEFAULT_GBIT", "link rate (Gbit/s) planned for when none is "
     "measured nor told"),
    ("hvd_compress.kernels.threads", "PARALLEL_MIN", "elements from which a CPU kernel may take its "
     "parallel build"),
]


def constants_table() -> str:
    """The constants the design notes name, as the code has them."""
    import importlib
    import inspect

    lines = ["| constant | value | what it sets |", "|---|---|---|"]
    for module, name, what in CONSTANTS:
        owner = importlib.import_module(module)
        if name.endswith("=...)"):
            cls, argument = name[:-5].split("(")
            value = inspect.signature(getattr(owner, cls).__init__).parameters[argument].default
        else:
            value = getattr(owner, name)
        if isinstance(value, int) and name.endswith("BYTES") and value >= 1 << 20 and not value % (1 << 20):
            shown = f"{value:,} ({value >> 20} MiB)"
        elif isinstance(value, int) and value > 1024 and not value & (value - 1):
            shown = f"{value:,} (2^{value.bit_length() - 1})"
        else:
            shown = f"{value:,}" if isinstance(value, int) else f"{value:g}"
        lines.append(f"| `{module.split('.')[-1]}.{name}` | {shown} | {what} |")
    lines += ["", "Read from the code by bench/report.py."]
    return "\n".join(lines)


def _ptb_limit(method: str) -> float:
    """Issue 14's quality target on PTB: final perplexity at most this much above `none`'s."""
    return 0.05 if method == "topk:ratio=0.001" else 0.03


def _accuracy(convergence: dict, tta: dict, quality: dict) -> dict[str, dict]:
    """Per hvd_compress compressor at its defaults: MNIST test accuracy minus `none`'s (points,
    by world size), PTB perplexity over `none`'s minus 1 (100 Mbit/s, by world size; and, where
    it ran, at the end of each converged model's schedule), the optimizer it ran with, and what fell
    outside the targets (``misses``)."""
    from quality import median_run, runs_of
    from time_to_accuracy import summary

    seeds: dict[tuple[str, str], list[dict]] = {}
    for run in runs_of(quality):
        seeds.setdefault((run["model"], run["method"]), []).append(run)
    finals = {key: median_run(runs)["valid_perplexity"][-1][1] for key, runs in seeds.items()}
    models = list(dict.fromkeys(model for model, _ in finals))

    runs = longest_run(convergence)
    final = {(c["np"], c["method"]): c["test_accuracy"][-1][1] for c in runs}
    ptb = [c for c in _time_to_accuracy_runs(tta) if c["workload"] == "ptb" and c["rate_mbit"] == 100]
    out: dict[str, dict] = {}
    for c in runs:
        method = c["method"]
        if not _ours(method) or "error_feedback=false" in method or method in out:
            continue
        mnist = {p: final[p, method] - final[p, "none"] for p in sorted({q for q, _ in final})
                 if (p, method) in final and (p, "none") in final}
        perplexity = {}
        for p in sorted({r["np"] for r in ptb}):
            here = [r for r in ptb if r["np"] == p]
            mine, dense = summary(method, here), summary("none", here)
            if mine and dense:
                perplexity[p] = mine["final"] / dense["final"] - 1
        converged = {m: finals[m, method] / finals[m, "none"] - 1 if {(m, method), (m, "none")} <= set(finals)
                     else None for m in models}
        misses = [f"MNIST np={p}" for p, d in mnist.items() if d < -0.5]
        misses += [f"PTB np={p}" for p, g in perplexity.items() if g > _ptb_limit(method)]
        misses += [f"PTB converged {m.upper()}" for m, g in converged.items() if g is not None and g > _ptb_limit(method)]
        optimizer = c.get("optimizer", "example's")
        out[method] = {"mnist": mnist, "ptb": perplexity, "converged": converged, "misses": misses,
                       "optimizer": "SGD, momentum 0.9" if optimizer == "example's" else f"`{optimizer}`"}
    return out


def accuracy_table(convergence: dict, tta: dict, quality: dict) -> str:
    """Each compressor's accuracy caveats, from the convergence runs (LeNet-5, MNIST), the
    time-to-accuracy runs (LSTM, PTB, 100 Mbit/s) and the converged language models' runs."""
    found = _accuracy(convergence, tta, quality)
    mnist_sizes = sorted({p for a in found.values() for p in a["mnist"]})
    ptb_sizes = sorted({p for a in found.values() for p in a["ptb"]})
    models = list(dict.fromkeys(m for a in found.values() for m in a["converged"]))
    lines = ["| method | MNIST test accuracy vs `none`, points, " + " / ".join(f"np={p}" for p in mnist_sizes)
             + " | PTB perplexity vs `none`, " + " / ".join(f"np={p}" for p in ptb_sizes)
             + "".join(f" | PTB, converged {m.upper()}, np=4" for m in models)
             + " | optimizer in these runs | kept accuracy |", "|---" * (5 + len(models)) + "|"]
    for method, a in found.items():
        mnist = " / ".join(f"{a['mnist'][p]:+.2f}" if p in a["mnist"] else "-" for p in mnist_sizes)
        ptb = " / ".join(f"{100 * a['ptb'][p]:+.1f}%" if p in a["ptb"] else "-" for p in ptb_sizes)
        kept = "yes" if not a["misses"] else "**no**: " + ", ".join(a["misses"])
        converged = "".join(" | -" if a["converged"].get(m) is None else f" | {100 * a['converged'][m]:+.1f}%"
                            for m in models)
        lines.append(f"| `{method}` | {mnist} | {ptb}{converged} | {a['optimizer']} | {kept} |")
    lines += ["", "Kept accuracy: final MNIST test accuracy at most 0.5 points below uncompressed "
              "Horovod's and final PTB validation perplexity at most 3% above it (5% for "
              "`topk:ratio=0.001`), at every world size measured and, where it ran, at the end of the "
              "converged language models' schedules (\"-\": not measured). One seed on MNIST; on PTB the median "
              "of three where three ran. The PTB columns before the converged one are early training "
              "(half an epoch). Details: [docs/benchmarks.md](docs/benchmarks.md#convergence), "
              "[converged](docs/benchmarks.md#quality)."]
    return "\n".join(lines)


def _model_sizes() -> dict[str, str]:
    """Each benched model's parameter count, from examples/models.py."""
    import sys

    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import models

    counts = {name: sum(p.numel() for p in build().parameters()) for name, build in models.MODELS.items()}
    return {name: f"{n / 1e3:.0f}K" if n < 1e6 else f"{n / 1e6:.0f}M" for name, n in counts.items()}


def choice_table(throughput: dict, auto: dict, convergence: dict, tta: dict, quality: dict) -> str:
    """Per model and link: the fastest compressors that kept accuracy, against uncompressed
    Horovod in the same cell (throughput sweep, np=2), and what the three first compressors
    did at their defaults (``auto`` measuring and trying, defaults sweep)."""
    kept = {m for m, a in _accuracy(convergence, tta, quality).items() if not a["misses"]}
    cells = _throughput_cells(throughput)
    defaults = {k: c for k, c in _throughput_cells(auto).items() if c.get("plan") is not None}
    keys = sorted({k[:3] for k in cells if k[1] == 2} | {k[:3] for k in defaults if k[1] == 2},
                  key=lambda k: (by_rate(k[2]), k[0]))
    first = ["topk:ratio=0.01", "onebit", "adacomp"]
    lines = ["| link | model | fastest three that kept accuracy, samples/s vs `none` | "
             "defaults (`auto`): " + " / ".join(f"`{m}`" for m in first) + " vs `none` |", "|---" * 4 + "|"]
    for model, p, rate in keys:
        dense = cells.get((model, p, rate, "none"))
        ranked = sorted(((c["samples_per_s"] / dense["samples_per_s"], m) for (mo, q, r, m), c in cells.items()
                         if (mo, q, r) == (model, p, rate) and m in kept) if dense else [], reverse=True)
        fastest = ", ".join(f"`{m}` {x:.1f}x" for x, m in ranked[:3]) or "not measured"
        base = defaults.get((model, p, rate, "none"))
        chosen = []
        for m in first:
            c = defaults.get((model, p, rate, m))
            chosen.append("-" if c is None or base is None else f"{c['samples_per_s'] / base['samples_per_s']:.2f}x "
                          f"({'dense' if c['plan'].get('chosen') == 0 else 'compressed'})")
        lines.append(f"| {rate_label(rate)} | {model} | {fastest} | {' / '.join(chosen)} |")
    size = _model_sizes()
    batch = next(iter(cells.values()))["batch_size"]
    lines += ["", f"np=2 on the simulated cluster (one core per worker, batch {batch} per worker): ResNet-18 "
              f"({size['resnet18']} parameters, compute-heavy), WideMLP ({size['widemlp']}, little compute "
              f"for its gradient), a small transformer ({size['transformer']}) and LeNet-5 "
              f"({size['lenet5']}). The fastest three come from the throughput sweep, the defaults from the later "
              "defaults sweep (in brackets the plan `auto` made final; dense: as Horovod alone); each "
              "ratio is against `none` in its own sweep."]
    return "\n".join(lines)


def _table_marks(text: str) -> dict[str, list[int]]:
    """For each column header of the markdown tables in ``text``: [met, not met] over its cells."""
    counts: dict[str, list[int]] = {}
    header = None
    for line in text.splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
            continue
        if set("".join(cells)) <= set("-"):
            continue
        for title, cell in zip(header, cells):
            bad = cell.count("**not met**")
            good = len(re.findall(r"\bmet\b", cell)) - bad
            if good or bad:
                tally = counts.setdefault(title, [0, 0])
                tally[0] += good
                tally[1] += bad
    return counts


def _verdict(met: int, missed: int) -> str:
    total = met + missed
    return f"met ({total} of {total})" if not missed else f"**not met** ({met} of {total} met)"


# (table, what its target columns check, which results files); "*" sums all its columns
SUMMARY = [
    ("throughput_targets", "ResNet-18, np=2, each compressor", ("throughput",)),
    ("auto_targets", "every compressor at its defaults >= 0.97x `none`, every cell", ("auto",)),
    ("convergence", "LeNet-5, MNIST", ("convergence",)),
    ("ptb_convergence", "LSTM on PTB, 100 Mbit/s, compressors with error feedback", ("time_to_accuracy",)),
    ("time_to_accuracy_targets", "time to target, each compressor", ("time_to_accuracy",)),
    ("breakdown", "compressed path's time (issue 12's step targets)", ("breakdown",)),
    ("scale_targets", "np=8 on the simulated cluster", ("wire_bytes",)),
    ("powersgd_rank", "our PowerSGD against DDP's hook, rank 1", ("throughput",)),
    ("memory", "peak memory per method", ("memory",)),
    ("nodes_targets", "clusters of nodes, TopK and OneBit", ("nodes",)),
    ("ddp_targets", "our DDP hooks against DDP's own", ("ddp",)),
    ("ddp_quality", "the same method as a DDP hook and through Horovod", ("time_to_accuracy",)),
    ("quality", "language models on PTB trained to the end of their schedules, np=4", ("quality",)),
    ("time_to_quality", "time to quality on the converged language models, np=4", ("quality",)),
]
WHOLE = {"auto_targets"}


def summary_table(*results: dict) -> str:
    """The targets of the generated tables, met or not: each target column's cells counted."""
    loaded = dict(zip(_SUMMARY_FILES, results))
    lines = ["| target | checked | verdict | table |", "|---|---|---|---|"]
    for name, what, files in SUMMARY:
        table = TABLES[name].render(*(loaded[f] for f in files))
        marks = _table_marks(table)
        if name in WHOLE:
            marks = {"": [sum(m[0] for m in marks.values()), sum(m[1] for m in marks.values())]}
        for column, (met, missed) in marks.items():
            title = what if not column else f"{what}: {column}"
            lines.append(f"| {title} | {', '.join(f'`{f}.json`' for f in files)} | {_verdict(met, missed)} | "
                         f"[{name}](docs/benchmarks.md#{name}) |")
    ratios = [r for r in loaded["cost_model"]["check"] if r["measured"] > 0]
    near = sum(abs(r["predicted"] / r["measured"] - 1) <= (0.10 if r["kind"] == "bytes" else 0.25) for r in ratios)
    lines.append(f"| cost model: predicted bytes within 10%, communication time within 25% of measured | "
                 f"`cost_model.json` | {_verdict(near, len(ratios) - near)} | "
                 "[cost_model](docs/benchmarks.md#cost_model) |")
    lines += ["", "Each verdict counts the cells of that target in the table it links to (a cell "
              "per compressor, world size, link or model). Generated by bench/report.py."]
    return "\n".join(lines)


# --- clusters of multi-worker nodes (bench/nodes.py) -------------------------------------------
_NODE_ROUTES = ("allgather", "twophase", "hierarchical", "hierarchical_compressed")


def _node_cells(result: dict) -> dict:
    """(model, layout, rate, method, route) -> the medians of that cell's repeats; route is
    "auto" for a method left to choose, "" for Horovod's own and PowerSGD."""
    groups: dict = {}
    for cell in result["cells"].values():
        if "failed" in cell:
            continue
        method, _, way = cell["method"].partition(",communication=")
        if ":communication=" in method:
            method, way = method.split(":communication=")
        elif _ours(method) and not method.startswith("powersgd"):
            way = way or "auto"
        key = (cell["model"], f"{cell['nodes']}x{cell['per_node']}", cell["rate_mbit"], method, way)
        groups.setdefault(key, []).append(cell)
    return {key: {"samples_per_s": statistics.median(c["samples_per_s"] for c in cells),
                  "uplink": statistics.median(c["tx_bytes_per_step"] for c in cells),
                  "repeats": len(cells), "plan": cells[0].get("plan", {})}
            for key, cells in groups.items()}


def _node_rows(cells: dict) -> list[tuple]:
    return sorted({key[:3] for key in cells}, key=lambda k: (k[1], by_rate(k[2]), k[0]))


def nodes_table(result: dict) -> str:
    """Samples/s and uplink megabytes per node and step, per method (rows) and route (columns)."""
    cells = _node_cells(result)
    routes = (*_NODE_ROUTES, "auto", "")
    lines = ["| model | nodes x workers | uplink | method | " + " | ".join(
        f"`{way}`" if way else "its one route" for way in routes) + " |", "|---" * (4 + len(routes)) + "|"]
    for row in _node_rows(cells):
        for method in dict.fromkeys(k[3] for k in cells if k[:3] == row):
            entries = []
            for way in routes:
                cell = cells.get((*row, method, way))
                entries.append("" if cell is None else
                               f"{cell['samples_per_s']:.1f} / {cell['uplink'] / 1e6:.2f}")
            lines.append(f"| {row[0]} | {row[1]} | {rate_label(row[2])} | `{method}` | " + " | ".join(entries) + " |")
    repeats = sorted({c["repeats"] for c in cells.values()})
    lines += ["", "Each entry: samples/s (all workers) / megabytes through each node's uplink per step "
              "(its interface counter, sent), medians of " + "-".join(map(str, repeats[::max(1, len(repeats) - 1)]))
              + " runs. `auto`: `communication=\"auto\"`, measured and tried on the cluster; its one route: "
              "Horovod's allreduce (`none`, `fp16`) or PowerSGD's."]
    return "\n".join(lines)


def nodes_targets_table(result: dict) -> str:
    """Issue 26's targets per cell: the hierarchical routes' uplink bytes against one payload per
    remote node, their speed against the best flat route's, and auto's against the best route's."""
    cells = _node_cells(result)
    lines = ["| model | nodes x workers | uplink | method | best hierarchical / best flat, samples/s "
             "(>= 2x at 2x4, 100 Mbit/s) | uplink bytes / (flat allgather's / (p-1)) x 2(N-1)/N (<= 1.3) "
             "| auto / best route (>= 0.97x) | auto chose |", "|---" * 8 + "|"]
    for model, layout, rate in _node_rows(cells):
        nodes, per_node = (int(v) for v in layout.split("x"))
        for method in dict.fromkeys(k[3] for k in cells if k[:3] == (model, layout, rate) and k[4]):
            get = lambda way: cells.get((model, layout, rate, method, way))  # noqa: E731
            flat = [c for c in (get("allgather"), get("twophase")) if c]
            node = [c for c in (get("hierarchical"), get("hierarchical_compressed")) if c]
            auto = get("auto")
            if not flat or not node:
                continue
            best_flat = max(c["samples_per_s"] for c in flat)
            best_node = max(node, key=lambda c: c["samples_per_s"])
            speed = best_node["samples_per_s"] / best_flat
            target = _mark(speed, 2.0) if (per_node, rate) == (4, 100) else f"{speed:.3g}x"
            payload = get("allgather")["uplink"] / (nodes * per_node - 1) if get("allgather") else None
            bytes_ratio = ""
            if payload:
                ratio = best_node["uplink"] / (payload * 2 * (nodes - 1) / nodes)
                bytes_ratio = f"{ratio:.3g}" + ((" met" if ratio <= 1.3 else " **not met**") if per_node == 4 else "")
            best = max(best_flat, best_node["samples_per_s"])
            chosen = ""
            if auto:
                plan = auto["plan"]
                routes = (plan.get("candidates") or [{}])[plan.get("chosen", 0)].get("routes", {})
                chosen = ", ".join(f"{way} {count}" for way, count in sorted(routes.items()))
            lines.append(f"| {model} | {layout} | {rate_label(rate)} | `{method}` | {target} | {bytes_ratio} | "
                         + (_mark(auto["samples_per_s"] / best, 0.97) if auto else "") + f" | {chosen} |")
    lines += ["", "Best hierarchical: the faster of `hierarchical` (dense inside the node) and "
              "`hierarchical_compressed`; best flat: the faster of `allgather` and `twophase`. One "
              "node's single compressed payload is measured, not modelled: the flat allgather's uplink "
              "bytes over p-1 (a ring allgather's node-crossing edge carries p-1 payloads). auto chose: "
              "tensors per route in the plan `auto` made final."]
    return "\n".join(lines)


# --- our methods as torch DDP hooks (hvd_compress.ddp) beside DDP's own -------------------------
def _ddp_cells(result: dict) -> dict:
    return {(c["model"], c["np"], c["rate_mbit"], c["method"]): c for c in result["cells"].values()}


def ddp_table(result: dict) -> str:
    """Samples/s of DDP's own hooks and of ours, per model, world size and link."""
    cells = _ddp_cells(result)
    methods = sorted({k[3] for k in cells}, key=lambda m: (not ddp_own(m), m))
    rows = sorted({k[:3] for k in cells}, key=lambda k: (k[0], k[1], by_rate(k[2])))
    lines = ["| model | np | link | " + " | ".join(f"`{m}`" for m in methods) + " |",
             "|---" * (3 + len(methods)) + "|"]
    for row in rows:
        lines.append(f"| {row[0]} | {row[1]} | {rate_label(row[2])} | " + " | ".join(
            f"{cells[(*row, m)]['samples_per_s']:.1f}" if (*row, m) in cells else "" for m in methods) + " |")
    lines += ["", "Samples/s, all workers, on the simulated cluster (bench/ddp_worker.py under "
              "bench/netsim.py). `ddp:allreduce`, `ddp:fp16`, `ddp:powersgd:R`: DDP's own (no hook, "
              "fp16_compress_hook, powerSGD_hook at rank R); the others: hvd_compress.ddp hooks."]
    return "\n".join(lines)


def ddp_targets_table(result: dict) -> str:
    """Issue 27's targets per cell: our fastest DDP hook against DDP's PowerSGD (the faster of
    ranks 1 and 4) everywhere, and against ddp:fp16 at 1 Gbit/s or slower."""
    cells = _ddp_cells(result)
    lines = ["| model | np | link | our fastest hook | vs DDP's PowerSGD (>= 1x) | vs `ddp:fp16` (>= 1x at <= 1 Gbit/s) |",
             "|---" * 6 + "|"]
    for row in sorted({k[:3] for k in cells}, key=lambda k: (k[0], k[1], by_rate(k[2]))):
        ours = [(c["samples_per_s"], m) for (*r, m), c in cells.items() if tuple(r) == row and not ddp_own(m)]
        powersgd = [cells[(*row, m)]["samples_per_s"] for m in ("ddp:powersgd:1", "ddp:powersgd:4") if (*row, m) in cells]
        fp16 = cells.get((*row, "ddp:fp16"))
        if not ours or not powersgd:
            continue
        best, method = max(ours)
        slow = row[2] is not None and row[2] <= 1000
        lines.append(f"| {row[0]} | {row[1]} | {rate_label(row[2])} | `{method}` | {_mark(best / max(powersgd), 1.0)} | "
                     + ((_mark(best / fp16["samples_per_s"], 1.0) if slow else f"{best / fp16['samples_per_s']:.3g}x")
                        if fp16 else "") + " |")
    return "\n".join(lines)


def ddp_quality_table(result: dict) -> str:
    """Issue 27's quality target: each design-card method through both front doors (Horovod's
    DistributedOptimizer, torch DDP's hook) in the same time-to-accuracy cells, PTB first. Same
    final quality within seed noise: the two medians differ by no more than the wider of the two
    seed ranges (with one seed a side there is no range to read, so the row says so)."""
    from time_to_accuracy import DDP_METHODS, summary

    runs = _time_to_accuracy_runs(result)
    lines = ["| workload | np | link | method | Horovod: s to target | final | DDP hook: s to target | final "
             "| same final quality (within seed noise) |", "|---" * 9 + "|"]
    cells = sorted({(c["workload"], c["np"], c["rate_mbit"]) for c in runs},
                   key=lambda k: (k[0] != "ptb", k[0], -k[1], by_rate(k[2])))
    digits = 2
    for workload, p, rate in cells:
        here = _cell(runs, workload, p, rate)
        for ddp in DDP_METHODS:
            method = ddp[len("ddp:"):]
            ours, theirs = summary(method, here), summary(ddp, here)
            if ours is None or theirs is None:
                continue
            gap = abs(ours["final"] - theirs["final"])
            noise = max(ours["high"] - ours["low"], theirs["high"] - theirs["low"])
            verdict = ("one seed: no noise to read" if min(ours["runs"], theirs["runs"]) < 2 else
                       f"{gap:.{digits}f} apart, noise {noise:.{digits}f}: " + ("met" if gap <= noise else "**not met**"))
            seconds = ["not reached" if s["seconds"] is None else f"{s['seconds']:.0f}" for s in (ours, theirs)]
            lines.append(f"| {workload.upper()} | {p} | {rate_label(rate)} | `{method}` | {seconds[0]} | "
                         f"{_final(ours, digits)} | {seconds[1]} | {_final(theirs, digits)} | {verdict} |")
    lines += ["", "The same method through Horovod (`--compression METHOD`) and as a torch DDP hook "
              "(`bench/ddp_train.py --hook METHOD`), the same model, data, seeds and clipping, on the "
              "simulated cluster; finals are medians over seeds with their range in brackets "
              "(validation perplexity on PTB, test accuracy % on MNIST)."]
    return "\n".join(lines)


# --- converged language models (bench/quality.py) ------------------------------------------------
def quality_table(result: dict) -> str:
    """Issue 31's quality targets on the converged language models: each method's final validation
    perplexity (median over its seeds) against uncompressed Horovod's, and the steps each needed
    to reach uncompressed training's final +2% and its own final."""
    from quality import DEFAULT_WITHIN, WITHIN, compressed_share, median_run, runs_of, steps_to

    def trained_on(run: dict) -> str:
        share = compressed_share(run)
        where = "loopback" if run.get("rate_mbit") is None else rate_label(run["rate_mbit"])
        return where if share is None else f"{where}, {100 * share:.0f}%"

    runs = runs_of(result)
    lines = ["| model | method | runs | trained on, steps compressed | final valid perplexity | final test perplexity "
             "| vs `none` (target) | steps to `none`'s final +2% | steps to its own final | DDP hook vs Horovod |",
             "|---" * 10 + "|"]
    for model in dict.fromkeys(r["model"] for r in runs):
        mine = {m: [r for r in runs if (r["model"], r["method"]) == (model, m)]
                for m in dict.fromkeys(r["method"] for r in runs if r["model"] == model)}
        finals = {m: median_run(these)["valid_perplexity"][-1][1] for m, these in mine.items()}
        dense = finals.get("none")
        for method, these in mine.items():
            seeds = sorted(r["valid_perplexity"][-1][1] for r in these)
            run = median_run(these)
            final = run["valid_perplexity"][-1][1]
            spread = f" [{seeds[0]:.1f}-{seeds[-1]:.1f}]" if len(seeds) > 1 else ""
            within = WITHIN.get(method, DEFAULT_WITHIN)
            versus = "" if dense is None or method == "none" else (
                f"{final / dense:.3f}x (<= {1 + within:g}x: {'met' if final <= dense * (1 + within) else '**not met**'})")
            reach = None if dense is None else steps_to(run, dense * 1.02)
            lines.append(f"| {model.upper()} | `{method}` | {len(these)} | {trained_on(run)} | {final:.1f}{spread} | "
                         f"{run['test_perplexity'][-1][1]:.1f} | {versus} | "
                         f"{'never' if reach is None else f'{reach:.0f}'} | {steps_to(run, final):.0f} | "
                         + (f"{final / finals[method[4:]]:.3f}x" if method[4:] in finals and method.startswith("ddp:")
                            else "") + " |")
    from quality import MODELS

    commands = " and ".join(dict.fromkeys(f"`examples/{MODELS[r['model']]['example']}.py {' '.join(r['options'])}`"
                                          for r in runs))
    lines += ["", f"np={runs[0]['np']}, {commands}: validation "
              f"perplexity at the end of training (the median seed's, the range over seeds in brackets), "
              f"the test perplexity of the same run, where it trained (Horovod's own `none` and `fp16` on "
              f"loopback; the methods `auto` routes on the simulated cluster, whose slow link keeps "
              f"them compressed: on loopback auto sent whole stretches dense) and the share of its steps "
              f"its tensors travelled compressed, and the steps until the first validation point "
              f"at or below the target (at the validation points, `--evals-per-epoch` an epoch). Targets: within 3% of `none`'s final "
              f"(TopK 0.1% within 5%). `ddp:METHOD`: the method as a torch DDP hook (bench/ddp_train.py), "
              f"its final beside the same method's through Horovod. By `bench/quality.py`."]
    return "\n".join(lines)


def time_to_quality_table(result: dict) -> str:
    """Issue 31's time targets on each converged model: the seconds each method needed to reach
    uncompressed training's final +2% (and its own final) at np=4, its run's own clock where it
    trained on that link, else computed (the steps it needed times its step on the simulated
    cluster); the best method against `none` (>= 3x sooner) and `fp16` (>= 1.5x) at the slowest
    link; then the checks of the computation against real throttled runs (within 10%)."""
    from quality import runs_of

    models = list(dict.fromkeys(r["model"] for r in runs_of(result)))
    tables = [_time_to_quality(result, model) for model in models]
    if len(models) > 1:
        tables = [f"{model.upper()}:\n\n{table}" for model, table in zip(models, tables)]
    return "\n\n".join(tables)


def _time_to_quality(result: dict, model: str) -> str:
    from quality import MODELS, cells_of, median_run, runs_of, seconds_to, steps_to

    runs = [r for r in runs_of(result) if r["model"] == model]
    steps, checks = cells_of(result, "step", model), cells_of(result, "check", model)
    median = {m: median_run([r for r in runs if r["method"] == m]) for m in dict.fromkeys(r["method"] for r in runs)}
    if "none" not in median or not steps:
        return "Not measured yet: `sudo .venv/bin/python bench/quality.py` times the steps on the simulated cluster."
    target = median["none"]["valid_perplexity"][-1][1] * 1.02
    rates = sorted({rate for _, rate in steps})

    def seconds(method: str, rate: float, perplexity: float) -> tuple[float | None, bool]:
        """The seconds, and whether they are computed rather than the run's own."""
        run = median[method]
        if run.get("rate_mbit") == rate:
            return seconds_to(run, perplexity), False
        reach, step = steps_to(run, perplexity), steps.get((method, rate))
        return (None if reach is None or step is None else reach * step["step_s"]), True

    def shown(value: tuple[float | None, bool]) -> str:
        return "never" if value[0] is None else f"*{value[0]:.0f}*" if value[1] else f"{value[0]:.0f}"

    def timed(method: str, rate: float) -> bool:
        return (method, rate) in steps or median[method].get("rate_mbit") == rate

    to_target = {(m, r): seconds(m, r, target)[0] for m in median for r in rates}
    compressed = [(t, m) for (m, r), t in to_target.items() if r == rates[0] and t is not None and m not in ("none", "fp16")]
    best = min(compressed)[1] if compressed else None
    if best is None:  # no compressed method reaches the target: not met, marked on the first timed
        best = next((m for m in median if m not in ("none", "fp16") and timed(m, rates[0])), None)
    lines = ["| method | " + " | ".join(f"{rate_label(r)}: s to `none`'s final +2% | vs `none` | vs `fp16` | "
                                         f"s to its own final" for r in rates) + " |", "|---" * (1 + 4 * len(rates)) + "|"]
    for method in median:
        row = []
        for rate in rates:
            mine = to_target[method, rate]
            row.append(shown(seconds(method, rate, target)) if timed(method, rate) else "")
            for base, need in (("none", 3.0), ("fp16", 1.5)):
                theirs = to_target.get((base, rate))
                ratio = None if mine is None or theirs is None or method == base else theirs / mine
                if (method, rate) == (best, rates[0]) and mine is None:
                    row.append("never (**not met**)")
                else:
                    row.append("" if ratio is None else _mark(ratio, need) if (method, rate) == (best, rates[0])
                               else f"{ratio:.2f}x")
            row.append(shown(seconds(method, rate, median[method]["valid_perplexity"][-1][1]))
                       if timed(method, rate) else "")
        lines.append(f"| `{method}` | " + " | ".join(row) + " |")
    lines += ["", "Seconds of training (evaluation excluded), np=4. Plain: the run's own clock, for the methods "
              "that trained on that simulated link (the runs above). In italics, computed: steps from the "
              "converged runs above (the median seed, at their validation points) x the method's step on "
              "the simulated cluster (for the LSTM the synthetic benchmark's `lstm` model at 8 streams a "
              "worker, median of 10 steps; for the transformer the example's own steps, the second half of "
              "its first 40 trained on the simulated cluster). The targets (>= 3x sooner than `none`, >= 1.5x "
              "than `fp16`) are marked on the best method at the slowest link (where no compressed method ever "
              "reaches `none`'s final +2%, as not met on the first); the other ratios are for reading."]
    lines += ["", "| checked at | method | steps | real training seconds | steps x step time "
              "| real / computed (within 10%) | first part's excess (s) | median half-epoch: real / computed |",
              "|---" * 8 + "|"]
    for (method, rate), check in checks.items():
        if (method, rate) in steps:
            step_s = steps[method, rate]["step_s"]
            (half, first), (end, last) = check["points"][0], check["points"][-1]
            lines.append(_check_row(rate, f"`{method}`, first steps", end - half, last - first,
                                    (end - half) * step_s, first - half * step_s, ""))
    for method, run in median.items():
        rate = run.get("rate_mbit")
        if (method, rate) in steps:
            step_s, half = steps[method, rate]["step_s"], run["steps_per_epoch"] * run["train_seconds"][0][0]
            ends = [0.0] + [seconds for _, seconds in run["train_seconds"]]
            parts = [b - a for a, b in zip(ends, ends[1:])]
            total = half * len(parts)
            lines.append(_check_row(rate, f"`{method}`, whole run", total, ends[-1], total * step_s,
                                    parts[0] - statistics.median(parts[1:]),
                                    f"{statistics.median(parts) / (half * step_s):.2f} (slowest: "
                                    f"{max(parts) / statistics.median(parts):.1f}x the median)"))
    lines += ["", "The checks: the recipe's first steps trained for real on the simulated cluster "
              f"(examples/{MODELS[model]['example']}.py under bench/netsim.py, evaluation excluded), the second half's "
              "seconds against what the computation predicts for them, the first half's excess over them being the "
              "run's one-time start (auto's link measurement and trials, the kernels' first calls); and each "
              "converged run that trained on the simulated link, whole, its first half-epoch's excess over "
              "its median half-epoch beside the run's, and the median half-epoch against what the "
              "computation predicts for it (the steady state; the slowest half-epoch shows the stalls the "
              "whole run includes). Computed cells leave the one-time start and the stalls out."]
    return "\n".join(lines)


def _check_row(rate: float, what: str, steps: float, real: float, computed: float, start: float,
               steady: str) -> str:
    ratio = real / computed
    return (f"| {rate_label(rate)} | {what} | {steps:.0f} | {real:.1f} | {computed:.1f} | {ratio:.2f} "
            f"({'met' if abs(ratio - 1) <= 0.10 else '**not met**'}) | {start:.1f} | {steady} |")


_SUMMARY_FILES = tuple(dict.fromkeys([f for _, _, files in SUMMARY for f in files] + ["cost_model"]))


# --- which code each results file measures, and which results are knowingly older ----------
_PACKAGE = "hvd_compress/"
_NETSIM = ("bench/netsim.py", "bench/throughput.py", "examples/pytorch_synthetic_benchmark.py",
           "examples/models.py")
#: results file -> the paths of the code it measures: a later commit to any of them makes the
#: results older than the code (tests/test_docs.py). The end-to-end benches measure the whole
#: package through their bench and worker scripts; the kernel bench the compress step alone.
MEASURES: dict[str, tuple[str, ...]] = {
    "kernels": ("bench/kernels.py", "hvd_compress/kernels/", "hvd_compress/methods/",
                "hvd_compress/memory.py", "hvd_compress/compressor.py"),
    "throughput": (_PACKAGE, *_NETSIM),
    "auto": (_PACKAGE, *_NETSIM),
    "breakdown": (_PACKAGE, "bench/breakdown.py", *_NETSIM),
    "wire_bytes": (_PACKAGE, "bench/wire_bytes.py", *_NETSIM),
    "small_tensors": (_PACKAGE, "bench/small_tensors.py", *_NETSIM),
    "convergence": (_PACKAGE, "bench/convergence.py", "examples/pytorch_mnist.py", "examples/training.py",
                    "examples/models.py"),
    "time_to_accuracy": (_PACKAGE, "bench/time_to_accuracy.py", "bench/netsim.py", "bench/ddp_train.py",
                         "examples/pytorch_mnist.py", "examples/pytorch_ptb_lm.py", "examples/training.py",
                         "examples/models.py"),
    "memory": (_PACKAGE, "bench/memory.py", "bench/memory_worker.py"),
    "nodes": (_PACKAGE, "bench/nodes.py", *_NETSIM),
    "ddp": (_PACKAGE, "bench/ddp_worker.py", *_NETSIM),
    "quality": (_PACKAGE, "bench/quality.py", "bench/ddp_train.py", "bench/time_to_accuracy.py",
                "examples/pytorch_ptb_lm.py", "examples/pytorch_ptb_transformer.py", "examples/training.py",
                *_NETSIM),
    "route_switch": (_PACKAGE, "bench/route_switch.py", "examples/pytorch_ptb_lm.py", "examples/training.py"),
    "cost_model": ("bench/cost_model.py", "bench/cpu_probe.py", "hvd_compress/communication/cost.py",
                   "hvd_compress/communication/route.py", "hvd_compress/methods/"),
}
_PLANNED = ("before `auto` measured the link and tried its plans (these runs planned from the cost "
            "model for a 1 Gbit/s link, the default then)")
_REPEATS = "bench/throughput.py could launch a cell several times (`--repeats`; a launch measures as before)"
_CONFIRMED = ("`auto`'s probe erred towards trying compression and its choice was checked against the "
              "final plan's first steps (communication/probe.py, planner.py)")
_KEPT = ("before a drift's re-check of a compressed plan left dense out of its re-trials "
         "(communication/planner.py, 5; only a run past 200 steps of a final compressed plan whose step "
         "time drifted by 25% takes that path)")
_NAMED = ("before the planner's agreements kept one name each (communication/planner.py: a name per trial "
          "step had left Horovod's response cache some 200 names, and the dense steps after the trials 2.3-3.1x "
          "slower on LeNet-5 at 1 Gbit/s)")
_LATER = f"{_KEPT}, and {_NAMED}"
#: results files knowingly older than the code they measure: what changed since, in their label
OLDER: dict[str, str] = {
    "kernels": "measured before the quantizers took their noise rank from torch.distributed too "
               "(methods/quantized.py), the thread pool read torchrun's LOCAL_WORLD_SIZE and Threshold's "
               "payload description named its count header: no kernel changed",
    "throughput": f"measured {_PLANNED}, before state keyed by parameter name and the registry; and {_LATER}",
    "breakdown": f"measured {_PLANNED}, before state keyed by parameter name and the registry; and {_LATER}",
    "convergence": f"measured {_PLANNED} and before the one-pass kernels (which send the same bytes); and {_LATER}",
    "wire_bytes": f"measured {_PLANNED} and before the one-pass kernels; its forced-allgather and "
                  f"Horovod rows come from an earlier sweep still; and {_LATER}",
    "small_tensors": "measured before the one-pass kernels, the bucketed two-phase alltoalls and `auto`'s "
                     f"counting of the compressed path's CPU; and {_LATER}",
    "memory": "measured before later changes to the kernels (the quantizers' CPU kernels rewritten) "
              f"and to `auto`'s trials; and {_LATER}",
    "ddp": f"measured before {_REPEATS} and {_CONFIRMED} (Horovod's door only: the DDP hooks plan "
           f"without trials); and {_LATER}",
    "nodes": f"measured before {_REPEATS} and {_CONFIRMED}; and {_LATER}",
    "route_switch": f"measured {_LATER}: its arms force the planner's decisions (bench/route_switch.py), "
                    "which neither change reaches",
}
#: results files whose latest commit added runs to cached runs of earlier sweeps: what those
#: earlier runs predate. Their commit is newer than the code, their oldest runs are not, so the
#: label says so here instead of in OLDER (which tests/test_docs.py checks against the commits).
EARLIER_RUNS: dict[str, str] = {
    "quality": "every run but the transformer's AdaComp, TopK 0.1% and PowerSGD rank 16 runs (rank 16: seeds 42 "
               "and 43) and their step times (measured on the code they label): "
               f"`none`'s seed-42 converged LSTM run, the LSTM's step times of `none`, `fp16` and the "
               f"design-card methods, and the first-steps checks measured before {_REPEATS}, "
               f"{_CONFIRMED}, and before bench/quality.py's check run read PTB's word count from the data "
               "(the same count); the converged runs of the methods `auto` routes, on the simulated cluster, "
               "one commit before the report read a run's own clock (which changed no measurement): all "
               "the LSTM's before bench/quality.py learned the transformer (which changed no LSTM run); the "
               "transformer's `none` run launched by hand with the same launcher, example and recipe one commit "
               "before bench/quality.py could launch it; all but the PowerSGD, DGC and EF-signSGD LSTM runs "
               "before a fix of bench/quality.py's docstring (the transformer's step time and run length); and "
               f"all but the transformer's `fp16` run and its step times {_KEPT} (DGC's and EF-signSGD's LSTM "
               "runs and QSGD's step times one commit before it); and all but the transformer's `fp16` step "
               f"times (re-measured on a quiet machine) and the seed-43 and seed-44 LSTM runs of `none`, TopK 1%, "
               f"OneBit and AdaComp {_NAMED}",
    "time_to_accuracy": "all but MNIST at 1 Gbit/s for `none` and the design-card methods (np=2 and np=4, 3 "
                        f"seeds each; re-run on the code they measure): most measured {_PLANNED}; some are "
                        "older still "
                        "(docs/benchmarks.md says which); the DDP hooks' runs of the design-card methods measured "
                        f"before {_CONFIRMED}; all before bench/time_to_accuracy.py learned the transformer's "
                        f"workload, which only bench/quality.py trains (no run here changed); and all {_LATER}",
    "auto": "all but LeNet-5's cells (re-run on the code they measure: 5 launches a cell, np=2, every link) "
            "measured one commit before a fix in the planner: a drift's re-trial of a plan of dense alone, "
            "followed by slower steps, ended in min() of an empty list; every cell of this sweep ran to its "
            f"end, so none took that path, and the fix changes nothing else; and {_LATER}",
}


def older(name: str) -> str | None:
    """What ``name``'s results predate, from OLDER or EARLIER_RUNS; None for current results."""
    return OLDER.get(name) or EARLIER_RUNS.get(name)


def _git(*args: str) -> str | None:
    try:
        run = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return run.stdout.strip() if run.returncode == 0 else None


def results_path(name: str) -> str:
    return f"bench/results/{name}.json"


@functools.cache
def results_commit(name: str) -> str | None:
    """The commit that last changed ``name``'s results file; None while it has uncommitted
    changes (or without git history)."""
    path = results_path(name)
    if _git("status", "--porcelain", "--", path):
        return None
    return _git("log", "-1", "--format=%H", "--", path) or None


@functools.cache
def measured_on(name: str) -> tuple[str, str] | None:
    """(short hash, date) of the commit ``name``'s results were added on top of: the first
    parent of the commit that last changed the file, or HEAD while it has uncommitted changes.
    Both stay the same when the results and the docs rendered from them are committed together."""
    commit = results_commit(name)
    base = f"{commit}^" if commit and _git("rev-parse", "--verify", "--quiet", f"{commit}^") else commit or "HEAD"
    found = _git("log", "-1", "--format=%h %cs", base)
    return tuple(found.split()) if found else None


@functools.cache
def newer_code(name: str) -> list[str]:
    """The commits after ``name``'s results commit that changed the code it measures
    (``MEASURES``), newest first ("HASH subject"); empty for uncommitted results."""
    commit = results_commit(name)
    if commit is None:
        return []
    found = _git("log", "--format=%h %s", f"{commit}..HEAD", "--", *MEASURES[name])
    return found.splitlines() if found else []


def label(names: tuple[str, ...]) -> str:
    """Which results a table comes from, the commit they were measured on, and whether they are
    knowingly older than the code they measure (``OLDER``): in full for a table of one results
    file, in short for a table of several (docs/benchmarks.md's results index has the rest)."""
    parts = []
    for name in names:
        where = measured_on(name)
        on = f"commit `{where[0]}` ({where[1]})" if where else "an unknown commit (no git history)"
        if len(names) == 1:
            part = f"`{results_path(name)}`, added on top of {on}"
            part += f": from an earlier sweep, {older(name)}" if older(name) else ""
        else:
            part = f"`{name}.json` on top of {on}" + (", an earlier sweep" if older(name) else "")
        parts.append(part)
    more = "" if len(names) == 1 else " (what changed since an earlier sweep: docs/benchmarks.md, Results)"
    return "Results: " + "; ".join(parts) + more + "."


#: how each results file is written
WRITTEN_BY = {
    "kernels": ".venv/bin/python bench/kernels.py",
    "throughput": "sudo .venv/bin/python bench/throughput.py",
    "auto": "sudo .venv/bin/python bench/throughput.py --results auto --fresh --repeats 3 --workers 2 --models "
            "lenet5 transformer resnet18 widemlp --methods none topk:ratio=0.01 onebit adacomp; the same with "
            "--repeats 5 --models lenet5 (no --fresh); --workers 2 --models resnet18 --methods powersgd:rank=1 dgc "
            "randomk threshold signsgd signum efsignsgd qsgd terngrad u8bit natural; --workers 4 --models "
            "resnet18 widemlp --methods none topk:ratio=0.01 onebit adacomp; then LeNet-5's cells deleted and "
            "re-run: --repeats 5 --workers 2 --models lenet5 --methods none topk:ratio=0.01 onebit adacomp",
    "breakdown": "sudo .venv/bin/python bench/breakdown.py",
    "wire_bytes": "sudo .venv/bin/python bench/wire_bytes.py",
    "small_tensors": "sudo .venv/bin/python bench/small_tensors.py",
    "convergence": ".venv/bin/python bench/convergence.py",
    "time_to_accuracy": "sudo .venv/bin/python bench/time_to_accuracy.py --repeats 3; then MNIST's 1 Gbit/s runs "
                        "of none and the design-card methods deleted and re-run: --workloads mnist --rates 1000 "
                        "--workers 2 4 --repeats 3 --methods none topk:ratio=0.01 onebit adacomp",
    "memory": ".venv/bin/python bench/memory.py",
    "nodes": "sudo .venv/bin/python bench/nodes.py",
    "ddp": "sudo .venv/bin/python bench/throughput.py --results ddp --workers 2 4 --models resnet18 widemlp lstm "
           "--methods ddp:allreduce ddp:fp16 ddp:powersgd:1 ddp:powersgd:4 ddp:topk:ratio=0.01 ddp:onebit "
           "ddp:adacomp ddp:powersgd:rank=1 ddp:efsignsgd",
    "quality": "sudo .venv/bin/python bench/quality.py; the same with --model transformer --methods none "
               "topk:ratio=0.01 onebit powersgd:rank=4; the transformer's `fp16` step cells deleted and "
               "re-measured: --no-runs --model transformer --methods fp16 (the 100 Mbit/s cell twice); "
               "--methods none --seeds 43; --methods none topk:ratio=0.01 onebit adacomp --seeds 43 44 (one "
               "method and seed a launch); --model transformer --methods adacomp, then topk:ratio=0.001, then "
               "powersgd:rank=16 (one method a launch); --model transformer --methods powersgd:rank=16 --seeds 43",
    "route_switch": ".venv/bin/python bench/route_switch.py",
    "cost_model": "sudo .venv/bin/python bench/cost_model.py fit; .venv/bin/python bench/cost_model.py cpu; "
                  ".venv/bin/python bench/cost_model.py",
}


def results_table(*results: dict) -> str:
    """Every results file the tables read: what writes it, how many cells it holds, the commit
    it was measured on, the code it measures and whether it is older than that code."""
    lines = ["| results | written by | cells | added on top of | the code it measures | older than that code |",
             "|---" * 6 + "|"]
    for name, result in zip(MEASURES, results):
        cells = len(result.get("cells") or result.get("sizes") or result.get("check") or ())
        where = measured_on(name)
        lines.append(f"| `{results_path(name)}` | `{WRITTEN_BY[name]}` | {cells} | "
                     + (f"`{where[0]}` ({where[1]})" if where else "unknown") + " | "
                     + ", ".join(f"`{path}`" for path in MEASURES[name]) + " | "
                     + (f"yes: {older(name)}" if older(name) else "no") + " |")
    lines += ["", "Cells: the configurations on record (a cell per model, world size, link and method; "
              "for kernels, per array size; for the cost model, per checked prediction). A results file "
              "is older than the code it measures when a commit after the one that added it changed one "
              "of those paths; tests/test_docs.py fails unless such a file is listed as older here "
              "(`OLDER` in bench/report.py), and when a listed one is not; a file whose last commit added "
              "runs to earlier ones says what those predate in `EARLIER_RUNS`."]
    return "\n".join(lines)


@dataclass
class Table:
    #: the results files (bench/results/NAME.json) it reads, passed to ``render`` in this order
    results: tuple[str, ...]
    render: Callable[..., str]
    #: whether it ends with ``label``: every table from results but the results index, which
    #: lists the same per row
    labelled: bool = True


# marker -> the table between ``<!-- bench:NAME -->`` and ``<!-- /bench:NAME -->``
TABLES: dict[str, Table] = {
    "kernels": Table(("kernels",), kernels_table),
    "wire_bytes": Table(("wire_bytes",), wire_bytes_table),
    "scale_targets": Table(("wire_bytes",), scale_targets_table),
    "cost_model": Table(("cost_model",), cost_model_table),
    "small_tensors": Table(("small_tensors",), small_tensors_table),
    "throughput": Table(("throughput",), throughput_table),
    "throughput_targets": Table(("throughput",), throughput_targets_table),
    "powersgd": Table(("throughput",), powersgd_table),
    "powersgd_rank": Table(("throughput",), powersgd_rank_table),
    "convergence": Table(("convergence",), convergence_table),
    "compression": Table(("convergence",), compression_table),
    "adacomp_layers": Table(("convergence",), adacomp_layers_table),
    "time_to_accuracy": Table(("time_to_accuracy",), time_to_accuracy_table),
    "time_to_accuracy_targets": Table(("time_to_accuracy",), time_to_accuracy_targets_table),
    "ptb_convergence": Table(("time_to_accuracy",), ptb_convergence_table),
    "ptb_adacomp_layers": Table(("time_to_accuracy",), ptb_adacomp_layers_table),
    "breakdown": Table(("breakdown",), breakdown_table),
    "memory": Table(("memory",), memory_table),
    "methods": Table((), lambda: methods_table({})),
    "constants": Table((), constants_table),
    "auto_targets": Table(("auto",), auto_targets_table),
    "nodes": Table(("nodes",), nodes_table),
    "ddp": Table(("ddp",), ddp_table),
    "ddp_targets": Table(("ddp",), ddp_targets_table),
    "ddp_quality": Table(("time_to_accuracy",), ddp_quality_table),
    "quality": Table(("quality",), quality_table),
    "time_to_quality": Table(("quality",), time_to_quality_table),
    "nodes_targets": Table(("nodes",), nodes_targets_table),
    "planning": Table(("auto",), planning_table),
    "choice": Table(("throughput", "auto", "convergence", "time_to_accuracy", "quality"), choice_table),
    "accuracy": Table(("convergence", "time_to_accuracy", "quality"), accuracy_table),
    "summary": Table(_SUMMARY_FILES, summary_table),
    "results": Table(tuple(MEASURES), results_table, labelled=False),
}

TABLES.update({f"defaults_{name}": Table((), functools.partial(defaults_line, name))
               for name in hvd_compress.METHODS})

MARKER = re.compile(r"<!-- bench:(\w+) -->")


def documents() -> list[str]:
    """README.md and every docs/*.md: the files that may hold tables."""
    return [README, *sorted(glob.glob(os.path.join(DOCS, "*.md")))]


def generated(name: str) -> str | None:
    """The text between ``name``'s markers as the results on disk give it, with its label; None
    when one of its results files is missing."""
    table = TABLES[name]
    results = [load(r) for r in table.results]
    if any(r is None for r in results):
        return None
    text = table.render(*results)
    return text + ("\n\n" + label(table.results) if table.results and table.labelled else "")


def render(text: str) -> str:
    """``text`` with every table between its markers regenerated from the results on disk; a
    table whose results are missing is left as it is."""
    for name in dict.fromkeys(MARKER.findall(text)):
        if name not in TABLES:
            raise KeyError(f"<!-- bench:{name} --> names no table of bench/report.py's TABLES")
        body = generated(name)
        if body is None:
            continue
        pattern = re.compile(rf"(<!-- bench:{name} -->\n).*?(<!-- /bench:{name} -->)", re.S)
        text = pattern.sub(lambda m: m.group(1) + body + "\n" + m.group(2), text)
    return text


def main() -> None:
    for path in documents():
        with open(path) as f:
            text = f.read()
        rendered = render(text)
        if rendered != text:
            with open(path, "w") as f:
                f.write(rendered)


if __name__ == "__main__":
    main()
