#!/usr/bin/python3
"""Plots of a Specula results folder (called by `specula plot DIR`; needs Debian's python3-matplotlib).

Reads DIR/summary.csv and writes PNG and SVG files into DIR/plots/:
  acceptance_vs_k         per-position acceptance alpha against draft length K
  speedup_vs_k            measured decoding speedup (95% CI over pairs or repetitions), Leviathan et al.'s
                          prediction and the cost model, against K
  per_position_acceptance acceptance at each draft position, for the longest draft of each setting
  accepted_length_hist    how many drafts each verification step accepted, for the longest drafts
  speedup_vs_temperature  measured decoding speedup against the sampling temperature
  speedup_vs_tau          measured decoding speedup against tau (tokens per verification step), with the
                          cost model's tau / (draft cost + verify cost)
  speedup_on_profile      with a cost profile (DIR/cost-profile.json): each setting's predicted speedup on the
                          profile's machine beside the one measured here, against tau

Every plot follows one rule, so a reader takes it in at a glance: one panel per drafter, one line per
method (and K or tree) and temperature within it, integer positions and lengths on integer ticks, and at
most MAX_SERIES lines in a panel (a drafter with more is split over several panels, each with its own
legend, so no colour is used twice in a panel).
"""
import csv
import json
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

MAX_SERIES = 6
PLOTS = ("acceptance_vs_k", "speedup_vs_k", "per_position_acceptance", "accepted_length_hist",
         "speedup_vs_temperature", "speedup_vs_tau", "speedup_on_profile")


def number(text, default=float("nan")):
    try:
        return float(text)
    except (TypeError, ValueError):
        return default


def finite(x):
    return x == x and not math.isinf(x)


# The columns summary.csv writes as words, and those it writes as ';'-separated numbers; every other column without a
# dot (the dotted ones are the settings' values), and the two settings the plots read as numbers, hold numbers or
# nothing. A cell that holds anything else was not written by a run: refused, naming its line and column, rather
# than drawn as a gap.
TEXT_COLUMNS = {"lossy", "greedy_lossless", "pair_drift", "profile_draft_source"}
LIST_COLUMNS = {"per_position_acceptance", "accepted_length_histogram"}
NUMERIC_SETTINGS = {"draft.num_draft_tokens", "sampling.temperature"}


def is_number(text):
    try:
        float(text)
        return True
    except ValueError:
        return False


def load(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for line, row in enumerate(rows, start=2):
        for column, text in row.items():
            if column is None or text is None or text == "" or column in TEXT_COLUMNS:
                continue
            if column in LIST_COLUMNS:
                items = [item for item in text.split(";") if item != ""]
            elif "." not in column or column in NUMERIC_SETTINGS:
                items = [text]
            else:
                continue
            for item in items:
                if not is_number(item):
                    sys.exit(f"plot: {path}: line {line}, column {column}: '{item}' is not a number")
    return rows


def drafter_name(row):
    return os.path.basename(row.get("draft.drafter", "").rstrip("/")) or "(none)"


def temperature(row):
    return number(row.get("sampling.temperature"), 1.0)


def shape(row):
    """The draft's shape: '3,2,1' for a tree, 'K=4' for a chain."""
    if row.get("draft.tree"):
        return row["draft.tree"]
    return f"K={row.get('draft.num_draft_tokens', '')}"


# The axes every label shows (drafter as the panel, method, shape, temperature); any other swept axis that differs
# between settings (a regex, top_p, a sibling scheme) joins the label, so two settings never share one line.
SHOWN_AXES = {"draft.drafter", "draft.method", "draft.num_draft_tokens", "draft.tree", "sampling.temperature"}


def mark_other_axes(rows):
    """Sets each row's "_others": 'regex=(ab|c)+ top_p=0.9' for the swept axes outside SHOWN_AXES that vary between
    the settings that have them (a chain has no sibling scheme: that is its method's, already shown)."""
    keys = sorted({k for r in rows for k in r if "." in k and k not in SHOWN_AXES})
    varying = [k for k in keys if len({r[k] for r in rows if r.get(k)}) > 1]
    for r in rows:
        r["_others"] = " ".join(f"{k.removeprefix('sampling.')}={r[k]}" for k in varying if r.get(k))


def series_label(row, with_shape):
    parts = [row.get("draft.method", "")]
    if with_shape:
        parts.append(shape(row))
    parts.append(f"T={row.get('sampling.temperature', '')}")
    parts.append(row.get("_others", ""))
    return " ".join(p for p in parts if p)


def panels(rows, with_shape):
    """[(title, [(series label, rows)])]: one panel per drafter, at most MAX_SERIES series each."""
    return panels_by(rows, lambda r: series_label(r, with_shape))


def panels_by(rows, series_of, min_points=1):
    """panels() with the series named by series_of(row); series with fewer than min_points rows are left out."""
    by_drafter = {}
    for r in rows:
        by_drafter.setdefault(drafter_name(r), {}).setdefault(series_of(r), []).append(r)
    out = []
    for drafter in sorted(by_drafter):
        series = [(k, v) for k, v in sorted(by_drafter[drafter].items()) if len(v) >= min_points]
        chunks = [series[i:i + MAX_SERIES] for i in range(0, len(series), MAX_SERIES)]
        for i, chunk in enumerate(chunks):
            out.append((drafter if len(chunks) == 1 else f"{drafter} ({i + 1}/{len(chunks)})", chunk))
    return out


def grid(n, sharey=True):
    columns = min(3, max(1, n))
    rows_n = (n + columns - 1) // columns
    fig, axes = plt.subplots(rows_n, columns, figsize=(4.6 * columns, 3.6 * rows_n), squeeze=False, sharey=sharey)
    for ax in axes.flat[n:]:
        ax.axis("off")
    return fig, axes


def integer_ticks(ax, values):
    values = sorted({int(v) for v in values if finite(v)})
    if values:
        step = max(1, math.ceil(len(values) / 12))
        ax.set_xticks(values[::step])


def finish_panel(ax, title, xlabel, extra_handles=()):
    ax.set_title(title, fontsize=9)
    ax.set_xlabel(xlabel)
    ax.grid(alpha=0.3)
    handles, _ = ax.get_legend_handles_labels()
    if handles or extra_handles:
        ax.legend(handles=list(handles) + list(extra_handles), fontsize=7)


def versus_k(chains, metric):
    layout = panels(chains, with_shape=False)
    if not layout:
        return None
    fig, axes = grid(len(layout))
    for ax, (title, series) in zip(axes.flat, layout):
        ks = []
        for i, (key, items) in enumerate(series):
            items = sorted(items, key=lambda r: number(r["draft.num_draft_tokens"]))
            x = [number(r["draft.num_draft_tokens"]) for r in items]
            ks += x
            color = f"C{i}"
            if metric == "speedup":
                # The decoding loop's speedup (without the prompt) is what the predictions model.
                column = "decode_speedup" if items[0].get("decode_speedup") else "speedup"
                y = [number(r[column]) for r in items]
                low = [max(0.0, v - number(r.get(column + "_ci_low"), v)) for v, r in zip(y, items)]
                high = [max(0.0, number(r.get(column + "_ci_high"), v) - v) for v, r in zip(y, items)]
                ax.errorbar(x, y, yerr=[low, high], marker="o", color=color, capsize=3, label=key)
                # Markers too, so a sweep with one K still shows its predictions.
                ax.plot(x, [number(r.get("predicted_speedup")) for r in items], linestyle="--", marker="x",
                        color=color, alpha=0.8)
                if items[0].get("cost_model_speedup"):
                    ax.plot(x, [number(r["cost_model_speedup"]) for r in items], linestyle=":", marker="o",
                            markerfacecolor="none", color=color)
            else:
                ax.plot(x, [number(r["alpha"]) for r in items], marker="o", color=color, label=key)
                ax.plot(x, [number(r.get("expected_acceptance")) for r in items], linestyle=":", color=color,
                        alpha=0.8)
        integer_ticks(ax, ks)
        if metric == "speedup":
            ax.axhline(1.0, color="grey", linewidth=0.8)
            extra = [Line2D([], [], color="black", linestyle="--", marker="x", label="Leviathan et al."),
                     Line2D([], [], color="black", linestyle=":", marker="o", markerfacecolor="none",
                            label="cost model")]
        else:
            extra = [Line2D([], [], color="black", linestyle=":", label="mean sum min(p, q)")]
        finish_panel(ax, title, "draft length K", extra)
    if metric == "speedup":
        # Intervals from two or three repetitions can be very wide: scale to the means and predictions.
        tops = [number(r.get(c)) for r in chains
                for c in ("decode_speedup", "speedup", "predicted_speedup", "cost_model_speedup")]
        axes.flat[0].set_ylim(0.0, 1.25 * max([t for t in tops if finite(t)] + [1.0]))
        ylabel = "decoding speedup (x)"
    else:
        ylabel = "acceptance per position, alpha"
    for ax in axes[:, 0]:
        ax.set_ylabel(ylabel)
    return fig


def longest_drafts(spec):
    """The setting with the most draft positions for each drafter, method, shape kind and temperature."""
    longest = {}
    for r in spec:
        key = (drafter_name(r), r.get("draft.method"), bool(r.get("draft.tree")), r.get("draft.tree"),
               r.get("sampling.temperature"), r.get("_others"))
        if key not in longest or number(r["draft_positions"]) > number(longest[key]["draft_positions"]):
            longest[key] = r
    return list(longest.values())


def per_draft_position(spec, column):
    layout = panels(longest_drafts(spec), with_shape=True)
    if not layout:
        return None
    fig, axes = grid(len(layout))
    for ax, (title, series) in zip(axes.flat, layout):
        xs_all = []
        for i, (key, items) in enumerate(series):
            values = [number(v, 0.0) for v in items[0][column].split(";") if v != ""]
            if column == "accepted_length_histogram":
                total = sum(values) or 1.0
                values = [v / total for v in values]
                xs = list(range(len(values)))  # 0 .. K drafts accepted
            else:
                xs = list(range(1, len(values) + 1))  # draft positions 1 .. K
            xs_all += xs
            ax.plot(xs, values, marker="o", color=f"C{i}", label=key)
        integer_ticks(ax, xs_all)
        if column == "accepted_length_histogram":
            finish_panel(ax, title, "drafts accepted in one step (tokens)")
        else:
            ax.set_ylim(0.0, 1.05)
            finish_panel(ax, title, "draft position (1 = first drafted token)")
    ylabel = ("fraction of verification steps" if column == "accepted_length_histogram"
              else "P(accepted | position reached)")
    for ax in axes[:, 0]:
        ax.set_ylabel(ylabel)
    return fig


def speedup_column(row):
    return "decode_speedup" if row.get("decode_speedup") else "speedup"


def speedup_vs_temperature(spec):
    # One line per method and shape; temperature is the axis, so it is not part of the label.
    layout = [(title, series) for title, series in
              panels_by(spec, lambda r: f"{r.get('draft.method', '')} {shape(r)} {r.get('_others', '')}".strip(),
                        min_points=2) if series]
    if not layout:
        return None
    fig, axes = grid(len(layout))
    for ax, (title, series) in zip(axes.flat, layout):
        temps = set()
        for i, (key, items) in enumerate(series):
            items = sorted(items, key=temperature)
            temps |= {temperature(r) for r in items}
            ax.plot([temperature(r) for r in items], [number(r[speedup_column(r)]) for r in items], marker="o",
                    color=f"C{i}", label=key)
        ax.set_xticks(sorted(temps))
        ax.axhline(1.0, color="grey", linewidth=0.8)
        finish_panel(ax, title, "sampling temperature T")
    for ax in axes[:, 0]:
        ax.set_ylabel("decoding speedup (x)")
    return fig


def speedup_vs_tau(spec):
    """Measured speedup against tau, each setting with its cost model's prediction: the measured point sits
    on the line tau / (draft cost + verify cost) through the origin when the cost model holds."""
    rows = [r for r in spec if finite(number(r.get("tau"))) and finite(number(r.get(speedup_column(r))))]
    layout = panels(rows, with_shape=True)
    if not layout:
        return None
    fig, axes = grid(len(layout))
    top_tau = max(number(r["tau"]) for r in rows)
    for ax, (title, series) in zip(axes.flat, layout):
        for i, (key, items) in enumerate(series):
            color = f"C{i}"
            for r in items:
                tau, measured = number(r["tau"]), number(r[speedup_column(r)])
                model = number(r.get("cost_model_speedup"))
                column = speedup_column(r)
                low = max(0.0, measured - number(r.get(column + "_ci_low"), measured))
                high = max(0.0, number(r.get(column + "_ci_high"), measured) - measured)
                ax.errorbar([tau], [measured], yerr=[[low], [high]], marker="o", color=color, capsize=3,
                            label=key if r is items[0] else None)
                if finite(model) and tau > 0:
                    # The cost model's line for this setting's measured costs, and its prediction on it.
                    ax.plot([0.0, 1.1 * top_tau], [0.0, 1.1 * top_tau * model / tau], linestyle=":", color=color,
                            alpha=0.6, linewidth=0.9)
                    ax.plot([tau], [model], marker="o", markerfacecolor="none", color=color)
        ax.plot([0.0, 1.1 * top_tau], [0.0, 1.1 * top_tau], color="grey", linestyle="--", linewidth=0.8)
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.set_xlim(0.0, 1.1 * top_tau)
        extra = [Line2D([], [], color="black", marker="o", markerfacecolor="none", linestyle=":",
                        label="cost model: tau / (draft + verify cost)"),
                 Line2D([], [], color="grey", linestyle="--", label="free drafting and verification")]
        finish_panel(ax, title, "tau: tokens per verification step", extra)
    tops = [number(r[speedup_column(r)]) for r in rows] + [number(r.get("cost_model_speedup")) for r in rows]
    axes.flat[0].set_ylim(0.0, 1.2 * max([t for t in tops if finite(t)] + [1.0]))
    for ax in axes[:, 0]:
        ax.set_ylabel("decoding speedup (x)")
    return fig


def speedup_on_profile(spec, machine):
    """With a cost profile (harness/README.md): each setting's speedup on the profile's machine, predicted from this
    run's acceptance, beside the speedup measured here, against tau (the acceptance both share)."""
    rows = [r for r in spec if finite(number(r.get("profile_speedup"))) and finite(number(r.get("tau")))]
    layout = panels(rows, with_shape=True)
    if not layout:
        return None
    fig, axes = grid(len(layout))
    for ax, (title, series) in zip(axes.flat, layout):
        for i, (key, items) in enumerate(series):
            color = f"C{i}"
            taus = [number(r["tau"]) for r in items]
            ax.plot(taus, [number(r["profile_speedup"]) for r in items], marker="^", linestyle="none", color=color,
                    label=key)
            ax.plot(taus, [number(r.get(speedup_column(r))) for r in items], marker="o", markerfacecolor="none",
                    linestyle="none", color=color)
        ax.axhline(1.0, color="grey", linewidth=0.8)
        extra = [Line2D([], [], color="black", marker="^", linestyle="none", label=f"predicted on {machine}"),
                 Line2D([], [], color="black", marker="o", markerfacecolor="none", linestyle="none",
                        label="measured here")]
        finish_panel(ax, title, "tau: tokens per verification step", extra)
    for ax in axes[:, 0]:
        ax.set_ylabel("decoding speedup (x)")
    return fig


def profile_machine(results):
    """The machine a results folder's cost profile was measured on ('' without one)."""
    path = os.path.join(results, "cost-profile.json")
    if not os.path.exists(path):
        return ""
    with open(path) as f:
        machine = json.load(f).get("machine", {})
    return machine.get("gpu_name") or machine.get("cpu_model") or "the profile's machine"


def build_figures(rows, machine="the profile's machine"):
    """{plot name: matplotlib figure} for the rows of a summary.csv (plots without data are left out)."""
    # Speculative settings only: beam search drafts nothing (no acceptance, no draft length).
    spec = [r for r in rows if r.get("draft.method", "") not in ("", "ar", "beam")]
    mark_other_axes(spec)
    chains = [r for r in spec if not r.get("draft.tree")]
    figures = {
        "acceptance_vs_k": versus_k(chains, "alpha"),
        "speedup_vs_k": versus_k(chains, "speedup"),
        "per_position_acceptance": per_draft_position(spec, "per_position_acceptance"),
        "accepted_length_hist": per_draft_position(spec, "accepted_length_histogram"),
        "speedup_vs_temperature": speedup_vs_temperature(spec),
        "speedup_vs_tau": speedup_vs_tau(spec),
        "speedup_on_profile": speedup_on_profile(spec, machine),
    }
    return {name: fig for name, fig in figures.items() if fig is not None}


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: plot.py RESULTS_DIR [--quiet]")
    results = sys.argv[1]
    quiet = "--quiet" in sys.argv[2:]
    out_dir = os.path.join(results, "plots")
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        sys.exit(f"plot: {out_dir} exists and is not a folder: move it away to draw the plots there")
    rows = load(os.path.join(results, "summary.csv"))
    os.makedirs(out_dir, exist_ok=True)
    written = []
    machine = profile_machine(results)
    for name, fig in build_figures(rows, machine).items():
        fig.tight_layout()
        for ext in ("png", "svg"):
            path = os.path.join(out_dir, f"{name}.{ext}")
            fig.savefig(path, dpi=120)
            written.append(path)
        plt.close(fig)
    if not quiet:
        print(f"plots: {len(written)} files in {out_dir}", file=sys.stderr)


if __name__ == "__main__":
    main()
