#!/usr/bin/python3
"""Plots of a Specula results folder (called by `specula plot DIR`; needs Debian's python3-matplotlib).

Reads DIR/summary.csv and writes PNG and SVG files into DIR/plots/:
  acceptance_vs_k         per-position acceptance alpha against draft length K, per drafter and method
  speedup_vs_k            measured speedup of the decoding loop (95% CI over repetitions; the whole run's for
                          summaries without it), Leviathan et al.'s prediction and the cost model
  per_position_acceptance acceptance at each draft position, for the longest drafts
  accepted_length_hist    how many drafts each verification step accepted, for the longest drafts
  speedup_vs_temperature  measured speedup against the sampling temperature
"""
import csv
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def number(text, default=float("nan")):
    try:
        return float(text)
    except (TypeError, ValueError):
        return default


def load(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def label(row, keys):
    parts = []
    for k in keys:
        v = row.get(k, "")
        if v:
            parts.append(os.path.basename(v) if k == "draft.drafter" else f"{k.split('.')[-1]}={v}")
    return " ".join(parts)


def save(fig, out_dir, name, written):
    fig.tight_layout()
    for ext in ("png", "svg"):
        path = os.path.join(out_dir, f"{name}.{ext}")
        fig.savefig(path, dpi=120)
        written.append(path)
    plt.close(fig)


def temperature(row):
    return number(row.get("sampling.temperature"), 1.0)


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: plot.py RESULTS_DIR [--quiet]")
    results = sys.argv[1]
    quiet = "--quiet" in sys.argv[2:]
    rows = load(os.path.join(results, "summary.csv"))
    spec = [r for r in rows if r.get("draft.method", "") not in ("", "ar")]
    chains = [r for r in spec if not r.get("draft.tree")]
    out_dir = os.path.join(results, "plots")
    os.makedirs(out_dir, exist_ok=True)
    written = []
    group_keys = ["draft.drafter", "draft.method", "sampling.temperature"]

    def groups(items, keys):
        out = {}
        for r in items:
            out.setdefault(label(r, keys), []).append(r)
        return out

    # Acceptance and speedup against K (chain-shaped drafts): one panel per drafter, a colour per method and
    # temperature, the predictions in the same colour.
    from matplotlib.lines import Line2D
    by_drafter = groups(chains, ["draft.drafter"])
    for metric, name, ylabel in (("alpha", "acceptance_vs_k", "acceptance per position, alpha"),
                                 ("speedup", "speedup_vs_k", "decoding speedup (x)")):
        panels = sorted(by_drafter.items())
        if not panels:
            continue
        columns = min(3, len(panels))
        rows_n = (len(panels) + columns - 1) // columns
        fig, axes = plt.subplots(rows_n, columns, figsize=(4.2 * columns + 2.2, 3.4 * rows_n), squeeze=False,
                                 sharey=True)
        series = sorted({label(r, ["draft.method", "sampling.temperature"]) for r in chains})
        colors = {key: f"C{i % 10}" for i, key in enumerate(series)}
        all_k = sorted({number(r["draft.num_draft_tokens"]) for r in chains})
        for ax, (drafter, rows_d) in zip(axes.flat, panels):
            for key, items in sorted(groups(rows_d, ["draft.method", "sampling.temperature"]).items()):
                items = sorted(items, key=lambda r: number(r["draft.num_draft_tokens"]))
                ks = [number(r["draft.num_draft_tokens"]) for r in items]
                # The decoding loop's speedup (without the prompt) is what the predictions model.
                measured = "decode_speedup" if metric == "speedup" and items[0].get("decode_speedup") else metric
                ys = [number(r[measured]) for r in items]
                color = colors[key]
                if metric == "speedup":
                    lo = [max(0.0, y - number(r[measured + "_ci_low"], y)) for y, r in zip(ys, items)]
                    hi = [max(0.0, number(r[measured + "_ci_high"], y) - y) for y, r in zip(ys, items)]
                    ax.errorbar(ks, ys, yerr=[lo, hi], marker="o", color=color, capsize=3)
                    ax.plot(ks, [number(r["predicted_speedup"]) for r in items], linestyle="--", color=color,
                            alpha=0.8)
                    if items[0].get("cost_model_speedup"):
                        ax.plot(ks, [number(r["cost_model_speedup"]) for r in items], linestyle=":", color=color,
                                alpha=0.9)
                else:
                    ax.plot(ks, ys, marker="o", color=color)
                    ax.plot(ks, [number(r["expected_acceptance"]) for r in items], linestyle=":", color=color,
                            alpha=0.8)
            if metric == "speedup":
                ax.axhline(1.0, color="grey", linewidth=0.8)
            if all_k:
                ax.set_xticks(all_k)
            ax.set_title(label(rows_d[0], ["draft.drafter"]), fontsize=9)
            ax.set_xlabel("draft length K")
            ax.grid(alpha=0.3)
        if metric == "speedup":
            # Intervals from two or three repetitions can be very wide: scale to the means and predictions.
            tops = [number(r[c]) for r in chains for c in ("decode_speedup", "speedup", "predicted_speedup",
                                                              "cost_model_speedup") if r.get(c)]
            tops = [t for t in tops if t == t]
            axes.flat[0].set_ylim(0.0, 1.25 * max(tops + [1.0]))
        for ax in axes.flat[len(panels):]:
            ax.axis("off")
        for ax in axes[:, 0]:
            ax.set_ylabel(ylabel)
        handles = [Line2D([], [], color=colors[k], marker="o", label=k) for k in series]
        if metric == "speedup":
            handles += [Line2D([], [], color="black", marker="o", label="measured (95% CI)"),
                        Line2D([], [], color="black", linestyle="--", label="Leviathan et al."),
                        Line2D([], [], color="black", linestyle=":", label="cost model (measured verify cost)")]
        else:
            handles += [Line2D([], [], color="black", marker="o", label="alpha (measured)"),
                        Line2D([], [], color="black", linestyle=":", label="mean sum min(p, q)")]
        fig.legend(handles=handles, fontsize=7, loc="center right")
        fig.tight_layout(rect=(0, 0, 1 - 2.0 / (4.2 * columns + 2.2), 1))
        for ext in ("png", "svg"):
            path = os.path.join(out_dir, f"{name}.{ext}")
            fig.savefig(path, dpi=120)
            written.append(path)
        plt.close(fig)

    # Per-position acceptance and accepted-length histogram at the longest draft of each group.
    longest = {}
    for r in spec:
        key = label(r, group_keys + ["draft.tree"])
        if key not in longest or number(r["draft_positions"]) > number(longest[key]["draft_positions"]):
            longest[key] = r
    for column, name, xlabel, ylabel in (
            ("per_position_acceptance", "per_position_acceptance", "draft position (1 = first drafted token)",
             "P(accepted | position reached)"),
            ("accepted_length_histogram", "accepted_length_hist", "drafts accepted in one step (tokens)",
             "fraction of verification steps")):
        fig, ax = plt.subplots(figsize=(11, 4.8))
        items = sorted(longest.items())
        width = 0.8 / max(1, len(items))
        for i, (key, r) in enumerate(items):
            values = [number(v, 0.0) for v in r[column].split(";") if v != ""]
            if column == "accepted_length_histogram":
                total = sum(values) or 1.0
                values = [v / total for v in values]
                xs = [j + i * width for j in range(len(values))]
            else:
                xs = [j + 1 + i * width for j in range(len(values))]
            ax.bar(xs, values, width=width, label=key, color=f"C{i % 10}")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        if items:
            ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
        ax.grid(alpha=0.3, axis="y")
        save(fig, out_dir, name, written)

    # Speedup against temperature.
    fig, ax = plt.subplots(figsize=(11, 4.8))
    keys = ["draft.drafter", "draft.method", "draft.num_draft_tokens", "draft.tree"]
    for i, (key, items) in enumerate(sorted(groups(spec, keys).items())):
        items = sorted(items, key=temperature)
        if len(items) < 2:
            continue
        ax.plot([temperature(r) for r in items], [number(r["speedup"]) for r in items], marker="o",
                color=f"C{i % 10}", label=key)
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xlabel("sampling temperature T")
    ax.set_ylabel("speedup over autoregressive (x)")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.grid(alpha=0.3)
    save(fig, out_dir, "speedup_vs_temperature", written)

    if not quiet:
        print(f"plots: {len(written)} files in {out_dir}", file=sys.stderr)


if __name__ == "__main__":
    main()
