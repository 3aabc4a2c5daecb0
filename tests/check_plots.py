#!/usr/bin/python3
"""Checks the rule every plot of experiments/plot.py follows, on a synthetic summary with more settings than
a panel may hold: every plot is drawn, no panel has more than plot.MAX_SERIES labelled series, no series has two
points at one x (two settings drawn as one line), and the plots over draft positions, accepted lengths and K have
integer ticks only.

  check_plots.py               the check
  check_plots.py --self-test   a figure that breaks each rule is reported (a check that cannot fail is a
                               defect)
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "experiments"))
import plot  # noqa: E402

INTEGER_AXES = ("acceptance_vs_k", "speedup_vs_k", "per_position_acceptance", "accepted_length_hist")


def synthetic_summary():
    """Two drafters x (chain/block x K in {2, 4, 6}, and a tree) x T in {0, 0.8, 1}: 21 series per drafter (a tree's
    shape is its own: a sweep gives it no K); the n-gram's chains
    also under a regex (a swept axis no label shows by default: its settings must not share a line), and beam search
    (no draft: in no plot)."""
    rows = []
    for drafter in ("results/models/draft", "ngram-order6.txt"):
        for method, tree in (("chain", ""), ("block", ""), ("tree", "3,2,1")):
            for k in ((3,) if tree else (2, 4, 6)):
                for t in ("0", "0.8", "1"):
                    positions = 3 if tree else k
                    rows.append({
                        "draft.drafter": drafter, "draft.method": method, "draft.num_draft_tokens": str(k),
                        "draft.tree": tree, "sampling.temperature": t, "draft_positions": str(positions),
                        "alpha": "0.7", "expected_acceptance": "0.72", "tau": str(1 + 0.5 * k),
                        "speedup": "1.5", "speedup_ci_low": "1.3", "speedup_ci_high": "1.7",
                        "decode_speedup": "1.6", "decode_speedup_ci_low": "1.4", "decode_speedup_ci_high": "1.8",
                        "predicted_speedup": "1.7", "cost_model_speedup": "1.65", "profile_speedup": "2.4",
                        "per_position_acceptance": ";".join(["0.8"] * positions),
                        "accepted_length_histogram": ";".join(["5"] * (positions + 1)),
                    })
    for r in list(rows):
        if r["draft.drafter"] == "ngram-order6.txt" and r["draft.method"] == "chain":
            r["sampling.regex"] = "none"
            rows.append(dict(r, **{"sampling.regex": "(ab|c)+", "speedup": "1.2", "decode_speedup": "1.3"}))
    rows.append({"draft.drafter": "ngram-order6.txt", "draft.method": "beam", "draft.num_draft_tokens": "4",
                 "draft.tree": "", "sampling.temperature": "0", "sampling.regex": "none", "draft_positions": "0",
                 "alpha": "0", "tau": "1", "speedup": "0.1", "decode_speedup": "0.1", "per_position_acceptance": "",
                 "accepted_length_histogram": ""})
    rows.append({"draft.drafter": "", "draft.method": "ar", "sampling.temperature": "0"})
    return rows


def violations(name, fig):
    found = []
    for i, ax in enumerate(a for a in fig.axes if a.axison):
        labels = ax.get_legend_handles_labels()[1]
        if len(labels) > plot.MAX_SERIES:
            found.append(f"{name} panel {i}: {len(labels)} series (at most {plot.MAX_SERIES})")
        if len(set(labels)) != len(labels):
            found.append(f"{name} panel {i}: a series label twice")
        # A series is one setting per x: two points at one x are two settings drawn as one line. A plain line carries
        # its label; an error bar's data line is its container's (labelled) first line.
        series = [(line.get_label(), line) for line in ax.get_lines() if line.get_label() in labels]
        series += [(c.get_label(), c.lines[0]) for c in ax.containers
                   if c.get_label() in labels and getattr(c, "lines", None) and c.lines[0] is not None]
        for label, line in series:
            xs = list(line.get_xdata())
            if len(set(xs)) != len(xs):
                found.append(f"{name} panel {i}: series '{label}' has two points at one x")
        if name in INTEGER_AXES:
            ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
            if any(t != int(t) for t in ticks):
                found.append(f"{name} panel {i}: x ticks {list(ticks)} are not integers")
    return found


def main():
    if "--self-test" in sys.argv[1:]:
        fig, ax = plot.plt.subplots()
        for i in range(plot.MAX_SERIES + 1):
            ax.plot([1, 2], [i, i], label=f"s{i}")
        ax.set_xticks([1.0, 1.5, 2.0])
        found = violations("per_position_acceptance", fig)
        # Two settings drawn as one series: a line, and an error bar (labelled through its container).
        fig2, (ax1, ax2) = plot.plt.subplots(1, 2)
        ax1.plot([1, 1, 2], [0, 1, 2], label="merged")
        ax2.errorbar([1, 1, 2], [0, 1, 2], yerr=[0.1, 0.1, 0.1], label="merged")
        found += violations("speedup_vs_tau", fig2)
        print("\n".join(found))
        if len(found) != 4:
            sys.exit("check_plots self-test: a panel of 7 series on half-integer ticks, and a line and an error bar "
                     "with two points at one x, were not reported four times")
        print("check_plots self-test: every broken rule reported")
        return
    figures = plot.build_figures(synthetic_summary())
    missing = [n for n in plot.PLOTS if n not in figures]
    found = [f"{n}: not drawn" for n in missing]
    for name, fig in figures.items():
        found += violations(name, fig)
    if found:
        sys.exit("\n".join(found))
    print(f"plots: {len(figures)} figures, every panel within {plot.MAX_SERIES} series, integer ticks where due")


if __name__ == "__main__":
    main()
