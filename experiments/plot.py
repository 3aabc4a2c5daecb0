#!/usr/bin/python3
"""Plots of a Specula results folder (called by `specula plot DIR`; needs Debian's python3-matplotlib).

Reads DIR/summary.csv and writes PNG and SVG files into DIR/plots/:
  acceptance_vs_k         per-position acceptance alpha against draft length K, per drafter and method
  speedup_vs_k            measured speedup (95% CI over repetitions) and Leviathan et al.'s prediction
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

    # Acceptance and speedup against K (chain-shaped drafts).
    for metric, name, ylabel in (("alpha", "acceptance_vs_k", "acceptance per position, alpha"),
                                 ("speedup", "speedup_vs_k", "speedup over autoregressive (x)")):
        fig, ax = plt.subplots(figsize=(11, 4.8))
        for i, (key, items) in enumerate(sorted(groups(chains, group_keys).items())):
            items = sorted(items, key=lambda r: number(r["draft.num_draft_tokens"]))
            ks = [number(r["draft.num_draft_tokens"]) for r in items]
            ys = [number(r[metric]) for r in items]
            color = f"C{i % 10}"
            if metric == "speedup":
                lo = [y - number(r["speedup_ci_low"], y) for y, r in zip(ys, items)]
                hi = [number(r["speedup_ci_high"], y) - y for y, r in zip(ys, items)]
                ax.errorbar(ks, ys, yerr=[lo, hi], marker="o", color=color, capsize=3, label=f"{key} (measured)")
                pred = [number(r["predicted_speedup"]) for r in items]
                ax.plot(ks, pred, linestyle="--", color=color, alpha=0.8, label=f"{key} (predicted)")
            else:
                ax.plot(ks, ys, marker="o", color=color, label=key)
                exp = [number(r["expected_acceptance"]) for r in items]
                ax.plot(ks, exp, linestyle=":", color=color, alpha=0.8)
        if metric == "speedup":
            ax.axhline(1.0, color="grey", linewidth=0.8)
        all_k = sorted({number(r["draft.num_draft_tokens"]) for r in chains})
        if all_k:
            ax.set_xticks(all_k)
        ax.set_xlabel("draft length K (tokens)")
        ax.set_ylabel(ylabel)
        ax.set_title(("Acceptance (dotted: mean sum min(p,q))" if metric == "alpha" else
                      "Speedup: measured (95% CI) vs Leviathan prediction (dashed)"))
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
        ax.grid(alpha=0.3)
        save(fig, out_dir, name, written)

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
