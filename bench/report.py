"""Writes the README's result tables from bench/results/*.json, so no number is typed by hand.

    .venv/bin/python bench/report.py

Each table sits between ``<!-- bench:NAME -->`` and ``<!-- /bench:NAME -->`` in README.md; a
missing results file leaves its table as it is.
"""
import os
import re

import hvd_compress
from common import RESULTS, by_rate, load, longest_run, rate_label

README = os.path.join(os.path.dirname(RESULTS), "..", "README.md")


def methods_table(result: dict) -> str:
    """The catalogue from the registry (hvd_compress.methods.METHODS): each method's spec, its
    constructor with every default that differs from the common ones, its paper and payload."""
    common = {"error_feedback": True, "min_numel": 1024, "communication": "auto", "link_gbit": None}
    lines = ["| spec | class, defaults | paper | what crosses the wire |", "|---|---|---|---|"]
    for name, cls in hvd_compress.METHODS.items():
        options = cls().options()
        lacks = [k for k in common if k not in options]
        options.pop("link_gbit", None)  # the environment's (HVD_COMPRESS_LINK_GBIT), not a default
        shown = ", ".join(f"{k}={v!r}" for k, v in options.items() if common.get(k, object()) != v)
        takes = f" (takes no {', '.join(f'`{k}`' for k in lacks)})" if lacks else ""
        payload = cls.PAYLOAD.replace("|", "\\|")
        lines.append(f"| `{name}` | `hc.{cls.__name__}({shown})`{takes} | {cls.PAPER} | {payload} |")
    lines.append("| `none`, `fp16` | Horovod's `Compression.none` / `Compression.fp16` | | "
                 "unchanged Horovod behaviour |")
    lines += ["", "Every compressor also takes `error_feedback=True`, `min_numel=1024`, "
              "`communication=\"auto\"` and `link_gbit=None` unless its row says otherwise "
              "(generated from `hvd_compress.METHODS` by bench/report.py)."]
    return "\n".join(lines)


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
              "\"serial build\" take the parallel kernel builds from 1M elements on; a rank that "
              "fills its host runs the serial ones."]
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

    cells = {(c["model"], c["np"], c["rate_mbit"], c["method"]): c for c in result["cells"].values()}
    return dict(sorted(cells.items(), key=lambda item: order(item[0])))


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
            row.append(f"{_mark(ratio, 0.97)} ({chosen})")
        lines.append(f"| {model}, `{method}` | " + " | ".join(row) + " |")
    if worst is not None:
        lines += ["", f"Samples/s over `none`'s in the same cell (target >= 0.97x, every cell), and "
                  f"the plan `auto` made final (dense: all tensors as Horovod sends them). Worst "
                  f"cell: {worst:.3g}x. Defaults only: no `link_gbit`, nothing told."]
    return "\n".join(lines)


def planning_table(result: dict) -> str:
    """What ``auto`` measured, and what measuring and trying cost, per cell (medians over the
    cell's methods)."""
    import statistics

    cells = [c for c in result["cells"].values() if c.get("plan", {}).get("measured")]
    groups: dict = {}
    for c in cells:
        groups.setdefault((c["model"], c["np"], c["rate_mbit"]), []).append(c)
    lines = ["| model | np | link | measured Gbit/s | overhead ms | probe s | steps until final | "
             "seconds until final |", "|---|---|---|---|---|---|---|---|"]
    for (model, p, rate), group in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1], by_rate(kv[0][2]))):
        def median(get):
            return statistics.median(get(c["plan"]) for c in group)
        lines.append(f"| {model} | {p} | {rate_label(rate)} | {median(lambda q: q['measured']['gbit']):.3g} | "
                     f"{1e3 * median(lambda q: q['measured']['overhead_s']):.2f} | "
                     f"{median(lambda q: q['probe_s']):.2f} | "
                     f"{median(lambda q: q['planning_steps']):.0f} | {median(lambda q: q['planned_s']):.1f} |")
    lines += ["", "Medians over the cell's compressors. Steps until final: the dense first step, "
              "the probe at its end, then a block of 4 to 64 steps for each candidate plan (no "
              "trials, final at step 1, where the model predicted no plan faster than dense). "
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
             + " | target |", "|---" * (3 + 2 * len(sizes)) + "|"]
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

    def sooner(method, workload, p, rate, baseline):
        here = _cell(runs, workload, p, rate)
        a, b = summary(method, here), summary(baseline, here)
        if a is None or b is None:
            return "not measured"
        if a["seconds"] is None:
            return "never reached"
        return "baseline never reached" if b["seconds"] is None else f"{b['seconds'] / a['seconds']:.2f}x"

    lines = ["| compressor | 100 Mbit/s np=4 sooner than `none` (>= 3x), MNIST / PTB | than `fp16` "
             "(>= 1.5x) | 1 Gbit/s sooner than `none` (>= 1x), np=2 / np=4, MNIST / PTB |",
             "|---" * 4 + "|"]
    for method in dict.fromkeys(c["method"] for c in runs):
        if not _ours(method) or "error_feedback=false" in method:
            continue
        cells = [" / ".join(sooner(method, w, 4, 100, base) for w in ("mnist", "ptb"))
                 for base in ("none", "fp16")]
        cells.append(" / ".join(sooner(method, w, p, 1000, "none") for p in (2, 4) for w in ("mnist", "ptb")))
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


# README marker -> (results file, renderer)
TABLES = {"kernels": ("kernels", kernels_table), "wire_bytes": ("wire_bytes", wire_bytes_table),
          "scale_targets": ("wire_bytes", scale_targets_table),
          "cost_model": ("cost_model", cost_model_table),
          "small_tensors": ("small_tensors", small_tensors_table),
          "throughput": ("throughput", throughput_table),
          "throughput_targets": ("throughput", throughput_targets_table),
          "powersgd": ("throughput", powersgd_table),
          "powersgd_rank": ("throughput", powersgd_rank_table),
          "convergence": ("convergence", convergence_table),
          "compression": ("convergence", compression_table),
          "adacomp_layers": ("convergence", adacomp_layers_table),
          "time_to_accuracy": ("time_to_accuracy", time_to_accuracy_table),
          "time_to_accuracy_targets": ("time_to_accuracy", time_to_accuracy_targets_table),
          "ptb_convergence": ("time_to_accuracy", ptb_convergence_table),
          "breakdown": ("breakdown", breakdown_table),
          "memory": ("memory", memory_table),
          "methods": (None, methods_table),
          "auto_targets": ("auto", auto_targets_table),
          "planning": ("auto", planning_table),
          "ptb_adacomp_layers": ("time_to_accuracy", ptb_adacomp_layers_table)}


def render(text: str) -> str:
    """``text`` with every table between its markers regenerated from the results on disk."""
    for name, (results, table) in TABLES.items():
        result = load(results) if results else {}  # None: not from results (the registry)
        if result is None:
            continue
        pattern = re.compile(rf"(<!-- bench:{name} -->\n).*?(<!-- /bench:{name} -->)", re.S)
        text = pattern.sub(lambda m: m.group(1) + table(result) + "\n" + m.group(2), text)
    return text


def main() -> None:
    with open(README) as f:
        text = f.read()
    with open(README, "w") as f:
        f.write(render(text))

if __name__ == "__main__":
    main()
