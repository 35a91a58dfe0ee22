"""PNG plots of bench/results/*.json, written next to them. Each bench calls its function when it
finishes; ``.venv/bin/python bench/plots.py`` redraws them all from the saved results."""
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import ticker  # noqa: E402

from common import RESULTS, by_rate, load, longest_run, rate_label  # noqa: E402


def _save(fig, name: str) -> str:
    path = os.path.join(RESULTS, name)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _panels(keys: list, title) -> tuple:
    """One panel per key, two to a row."""
    columns = min(2, len(keys))
    rows = -(-len(keys) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(6 * columns, 4.2 * rows), squeeze=False)
    flat = list(axes.flat)
    for ax in flat[len(keys):]:
        ax.remove()
    for ax, key in zip(flat, keys):
        ax.set_title(title(key))
        ax.grid(alpha=0.3, which="both")
    return fig, dict(zip(keys, flat))


def _plain_log(axis) -> None:
    axis.set_major_formatter(ticker.ScalarFormatter())
    axis.set_minor_formatter(ticker.NullFormatter())


def throughput(result: dict) -> list[str]:
    """samples/s against link rate (one line per method, one panel per model and np), and MB
    sent per worker and step (one bar per method, at the slowest rate measured)."""
    cells = list(result["cells"].values())
    panels = sorted({(c["model"], c["np"]) for c in cells})
    rates = sorted({c["rate_mbit"] for c in cells}, key=by_rate)
    labels = [rate_label(r) for r in rates]
    methods = list(dict.fromkeys(c["method"] for c in cells))
    fig, axes = _panels(panels, lambda k: f"{k[0]}, np={k[1]}")
    for (model, np_), ax in axes.items():
        for method in methods:
            points = [(labels[rates.index(c["rate_mbit"])], c["samples_per_s"]) for c in cells
                      if (c["model"], c["np"], c["method"]) == (model, np_, method)]
            points.sort(key=lambda p: labels.index(p[0]))
            if points:
                ax.plot(*zip(*points), marker="o", label=method,
                        linestyle="--" if method.startswith("ddp:") else "-")
        ax.set_yscale("log")
        _plain_log(ax.yaxis)
        ax.set_ylabel("samples/s (all workers)")
    axes[panels[-1]].legend(fontsize=8)
    paths = [_save(fig, "throughput.png")]

    slowest = rates[0]
    fig, axes = _panels(panels, lambda k: f"{k[0]}, np={k[1]}: MB sent per worker and step"
                        + f" ({rate_label(slowest)})")
    for (model, np_), ax in axes.items():
        row = [(c["method"], c["tx_bytes_per_step"] / 1e6) for c in cells
               if (c["model"], c["np"], c["rate_mbit"]) == (model, np_, slowest)]
        if row:
            ax.barh(*zip(*row))
            ax.set_xscale("log")
            _plain_log(ax.xaxis)
            ax.invert_yaxis()
    paths.append(_save(fig, "bytes_per_step.png"))
    return paths


def convergence(result: dict) -> list[str]:
    """Test error per epoch and training loss per logged interval, one line per method (dotted:
    error feedback off). Log scales, so that a run that collapsed and the close ones all show."""
    cells = longest_run(result)
    sizes = sorted({c["np"] for c in cells})
    paths = []
    for name, series, ylabel, transform in [
            ("accuracy.png", "test_accuracy", "test error (%, log)", lambda acc: 100 - acc),
            ("loss.png", "train_loss", "training loss (log)", lambda loss: loss)]:
        fig, axes = _panels(sizes, lambda p: f"LeNet-5 on MNIST, np={p}")
        for np_, ax in axes.items():
            for c in cells:
                if c["np"] == np_:
                    x, y = zip(*c[series])
                    ax.plot(x, [transform(v) for v in y], label=c["method"], marker=".",
                            linestyle=":" if c["error_feedback"] is False else "-")
            ax.set_yscale("log")
            ax.set_xlabel("epoch")
            ax.set_ylabel(ylabel)
        axes[sizes[-1]].legend(fontsize=7)
        paths.append(_save(fig, name))
    return paths


def kernels(result: dict) -> list[str]:
    """Compress + residual update time per implementation, one panel per tensor size."""
    sizes = list(result["sizes"])
    fig, axes = _panels(sizes, lambda n: f"compress + residual update, {int(n) / 1e6:g}M fp32")
    for n, ax in axes.items():
        rows = result["sizes"][n]["compress_ms"]
        ax.barh(list(rows), list(rows.values()))
        ax.set_xscale("log")
        ax.set_xlabel("ms (median)")
        ax.invert_yaxis()
    return [_save(fig, "kernels.png")]


def cost_model(result: dict) -> list[str]:
    """Per-worker bytes and communication time per step against the worker count, as the cost
    model projects them (lines, one per method) and as measured (markers, same colour), one
    row per model: bytes, then time at each link rate."""
    models = list(result["projection"])
    rates = list(next(iter(result["projection"][models[0]].values()))["by_rate"])
    keys = [(m, kind, rate) for m in models for kind, rate in [("bytes", None), *[("seconds", r) for r in rates]]]
    title = {"bytes": "MB sent per worker and step", "seconds": "communication s/step"}
    fig, axes = _panels(keys, lambda k: f"{k[0]}: {title[k[1]]}" + (f", {k[2]} Gbit/s" if k[2] else ""))
    measured = {"bytes": [r for r in result["check"] if r["kind"] == "bytes"],
                "seconds": [r for r in result["check"] if r["kind"] == "seconds"]}
    for (model, kind, rate), ax in axes.items():
        for label, line_ in result["projection"][model].items():
            points = line_["by_rate"][rate or rates[-1]]
            scale = 1e6 if kind == "bytes" else 1
            line, = ax.plot([q["p"] for q in points], [q[kind] / scale for q in points], label=label,
                            linestyle="--" if "allgather" in label else "-")
            ours = [r for r in measured[kind] if r["model"] == model and r["method"] == line_["method"]
                    and (kind == "bytes" or float(rate) == 0.1)]
            if ours:
                ax.plot([r["np"] for r in ours], [r["measured"] / scale for r in ours], "o",
                        color=line.get_color())
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("workers")
    axes[keys[0]].legend(fontsize=6)
    return [_save(fig, "cost_model.png")]


def nodes_projection(result: dict) -> list[str]:
    """Per-node uplink bytes and communication time per step against the node count (nodes of
    8 workers), as the cost model projects them, one row per model."""
    projection = result["nodes_projection"]
    models = list(projection)
    rates = list(next(iter(projection[models[0]].values()))["by_rate"])
    keys = [(m, kind, rate) for m in models for kind, rate in [("uplink_bytes", None), *[("seconds", r) for r in rates]]]
    title = {"uplink_bytes": "MB through each node's uplink per step", "seconds": "communication s/step"}
    fig, axes = _panels(keys, lambda k: f"{k[0]}: {title[k[1]]}" + (f", {k[2]} Gbit/s uplink" if k[2] else ""))
    for (model, kind, rate), ax in axes.items():
        for label, line_ in projection[model].items():
            points = line_["by_rate"][rate or rates[-1]]
            scale = 1e6 if kind == "uplink_bytes" else 1
            ax.plot([q["nodes"] for q in points], [q[kind] / scale for q in points], label=label,
                    linestyle="--" if "allgather" in label else "-")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("nodes of 8 workers")
    axes[keys[0]].legend(fontsize=6)
    return [_save(fig, "nodes_projection.png")]


def time_to_accuracy(result: dict) -> list[str]:
    """Per workload: quality against training seconds, one line per method in the same colour
    and style in every panel (its median run: the seed whose final quality is the median of its
    seeds'; dash-dotted, the DDP peer), one panel per world size and link rate, the rest of the
    catalogue in a panel of its own beside uncompressed Horovod, the target as a horizontal
    line. Runs of --quick and of the full sweep are drawn apart (the full ones when both exist)."""
    from time_to_accuracy import CATALOGUE, METHODS, WORKLOADS, quality_target

    runs = list(result["cells"].values())
    rest = set(CATALOGUE) - set(METHODS)
    colour = {m: i for i, m in enumerate(dict.fromkeys(METHODS + [c["method"] for c in runs]))}
    paths = []
    for workload in dict.fromkeys(c["workload"] for c in runs):
        cells = [c for c in runs if c["workload"] == workload]
        if any(not c["quick"] for c in cells):
            cells = [c for c in cells if not c["quick"]]
        series = WORKLOADS[workload]["quality"]
        panels = sorted({(c["np"], c["rate_mbit"], c["method"] in rest) for c in cells},
                        key=lambda k: (k[0], by_rate(k[1]), k[2]))
        fig, axes = _panels(panels, lambda k: f"{workload}, np={k[0]}, {rate_label(k[1])}"
                            + (", rest of the catalogue" if k[2] else ""))
        for (np_, rate, catalogue), ax in axes.items():
            here = [c for c in cells if (c["np"], c["rate_mbit"]) == (np_, rate)]
            methods = [m for m in dict.fromkeys(c["method"] for c in here)
                       if (m in rest) == catalogue or m == "none"]
            for method in methods:
                mine = sorted((c for c in here if c["method"] == method), key=lambda c: c[series][-1][1])
                c, i = mine[(len(mine) - 1) // 2], colour[method]
                ax.plot([t for _, t in c["train_seconds"]], [q for _, q in c[series]], marker=".",
                        color=f"C{i % 10}", label=method + (f" (median of {len(mine)})" if len(mine) > 1 else ""),
                        linestyle="-." if method.startswith("ddp:") else ["-", "--", ":"][i // 10 % 3])
            target = quality_target(here[0], here)
            if target is not None:
                ax.axhline(target, color="grey", linewidth=0.8)
            ax.set_xscale("log")
            _plain_log(ax.xaxis)
            ax.set_xlabel("training seconds (evaluation excluded)")
            ax.set_ylabel("test accuracy (%)" if workload == "mnist" else "validation perplexity (log)")
            if workload == "mnist":
                ax.set_ylim(94, 100)
            else:
                ax.set_yscale("log")
            ax.legend(fontsize=6)
        paths.append(_save(fig, f"time_to_accuracy_{workload}.png"))
    return paths


def quality(result: dict) -> list[str]:
    """Validation perplexity of the converged language models, one line per method (its median
    seed), one row of panels per model: against optimizer steps, and against training seconds
    at np=4 on the slowest link timed (the run's own clock where it trained there, solid;
    computed as steps x step time otherwise, dotted). The quick runs are drawn apart from the
    full ones."""
    from quality import cells_of, median_run, runs_of

    runs = runs_of(result)
    models = sorted({r["model"] for r in runs})
    rate = min((rate for m in models for _, rate in cells_of(result, "step", m)), default=None)
    keys = [(m, axis) for m in models for axis in ("steps", "seconds")[:1 if rate is None else 2]]
    fig, axes = _panels(keys, lambda k: f"PTB {k[0]}, np={runs[0]['np']}, converged"
                        + (f", {rate_label(rate)}" if k[1] == "seconds" else ""))
    for (model, axis), ax in axes.items():
        steps = cells_of(result, "step", model)
        methods = list(dict.fromkeys(r["method"] for r in runs if r["model"] == model))
        for i, method in enumerate(methods):
            mine = [r for r in runs if (r["model"], r["method"]) == (model, method)]
            run = median_run(mine)
            x = [e * run["steps_per_epoch"] for e, _ in run["valid_perplexity"]]
            style = ["-", "--"][i // 10 % 2]
            if axis == "seconds":
                if run.get("rate_mbit") == rate:
                    x = [seconds for _, seconds in run["train_seconds"]]
                elif (method, rate) in steps:
                    x, style = [n * steps[method, rate]["step_s"] for n in x], ":"
                else:
                    continue
            ax.plot(x, [v for _, v in run["valid_perplexity"]], marker=".", color=f"C{i % 10}", linestyle=style,
                    label=method + (f" (median of {len(mine)})" if len(mine) > 1 else ""))
        ax.set_yscale("log")
        ax.set_yticks([t for t in (100, 120, 150, 200, 300, 500, 1000, 2000) if t <= max(
            v for r in runs for _, v in r["valid_perplexity"])])  # a decade's span has no labelled major tick
        _plain_log(ax.yaxis)
        if axis == "seconds":
            ax.set_xscale("log")
            ax.set_xlabel("training seconds (log; dotted: steps x step time)")
        else:
            ax.set_xlabel("optimizer steps")
        ax.set_ylabel("validation perplexity (log)")
        ax.legend(fontsize=7)
    return [_save(fig, "quality.png")]


def main() -> None:
    for name, draw in [("throughput", throughput), ("convergence", convergence), ("kernels", kernels),
                       ("cost_model", cost_model), ("time_to_accuracy", time_to_accuracy),
                       ("quality", quality)]:
        result = load(name)
        if result is not None:
            print("wrote", *draw(result))


if __name__ == "__main__":
    main()
