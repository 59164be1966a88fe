#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""plot_report.py - PNG plots of a tpscope run: `tpscope report RUN_DIR --plots` calls this.

  traffic.png  PCIe rx/tx MB/s over time per GPU (from samples.jsonl, cumulative counters
               differenced), one panel per arm, phase windows shaded, first valid repetition
  arms.png     bars per arm: tok/s and rx MB/s per card for each phase (from the report JSON),
               with the min-max spread across repetitions as error bars
  pm_step.png  where PM sampled a decode step (report JSON decode_step_pm): that step's PCIe tx/rx
               MB/s record by record, a step chart over us from the step's start, one panel per arm
               and GPU (the first valid repetition), the burst threshold drawn across

Usage: plot_report.py --report REPORT.json [--samples RUN_DIR/samples.jsonl] --out DIR
Needs matplotlib (Debian: python3-matplotlib). Exit 0 on success, 1 on bad input.
"""
import argparse
import json
import os
import sys
import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PHASE_COLORS = {"prefill": "#f4d6a0", "decode": "#b8d8f0"}


def load_samples(path):
    rows = []
    if path and os.path.exists(path):
        with open(path) as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError as e:
                        sys.exit(f"plot_report.py: {path}:{n}: corrupt sample ({e})")
    return rows


def rates(rows, key):
    """(t_s, MB/s) between consecutive reads that both carry `key`."""
    pts = [(r["t_ns"], r[key]) for r in rows if r.get(key) is not None]
    pts.sort()
    out = []
    for (t0, b0), (t1, b1) in zip(pts, pts[1:]):
        if t1 > t0 and b1 >= b0:  # a counter that went back (a new meter) is a gap, not a rate
            out.append(((t0 + t1) / 2e9, (b1 - b0) / (t1 - t0) * 1e3))  # bytes/ns * 1e3 = MB/s
    return out


def finish(fig, report):
    """Lays the figure out; a recording (report["recording"]) is named above the panels."""
    text = report.get("recording") or ""
    if not text:
        fig.tight_layout()
        return
    lines = textwrap.wrap(text, 110)
    fig.suptitle("\n".join(lines), fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 1 - (0.13 * len(lines) + 0.05) / fig.get_figheight()))


def save(fig, report, out, name):
    """Lays the figure out (finish), writes it to out/name and returns the path."""
    finish(fig, report)
    path = os.path.join(out, name)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_traffic(report, samples, out):
    arms = [a["arm"] for a in report["arms"]]
    fig, axes = plt.subplots(len(arms), 1, figsize=(10, 2.6 * max(1, len(arms))), squeeze=False)
    for ax, arm in zip(axes[:, 0], arms):
        wins = [w for w in report.get("windows", []) if w["arm"] == arm and w.get("valid", True)]
        rep = min((w["repetition"] for w in wins), default=0)
        wins = [w for w in wins if w["repetition"] == rep]
        t0 = min((w["start_ns"] for w in wins), default=0)
        for w in wins:
            ax.axvspan((w["start_ns"] - t0) / 1e9, (w["end_ns"] - t0) / 1e9,
                       color=PHASE_COLORS.get(w["phase"], "#dddddd"), alpha=0.6, label=w["phase"])
        rows = [s for s in samples if s["arm"] == arm and s["repetition"] == rep]
        for gpu in sorted({s["gpu"] for s in rows}):
            g = [s for s in rows if s["gpu"] == gpu]
            for key, style in (("pcie_rx_bytes", "-"), ("pcie_tx_bytes", "--")):
                pts = rates(g, key)
                if pts:
                    ax.plot([t - t0 / 1e9 for t, _ in pts], [v for _, v in pts], style,
                            label=f"GPU {gpu} {key.split('_')[1]}")
        ax.set_title(f"arm {arm} (repetition {rep + 1})", fontsize=10)
        ax.set_ylabel("PCIe MB/s")
        handles, labels = ax.get_legend_handles_labels()
        seen = dict(zip(labels, handles))
        ax.legend(seen.values(), seen.keys(), fontsize=7, loc="upper right")
    axes[-1, 0].set_xlabel("seconds from the first phase")
    return save(fig, report, out, "traffic.png")


def plot_arms(report, out):
    phases = report["phases"]
    arms = report["arms"]
    fig, axes = plt.subplots(2, len(phases), figsize=(4.5 * len(phases), 6), squeeze=False)
    names = [a["arm"] for a in arms]
    for col, phase in enumerate(phases):
        for row, (key, label) in enumerate((("tok_s", "tok/s"), ("rx_per_card_mbps", "rx MB/s per card"))):
            ax = axes[row, col]
            vals, lo, hi = [], [], []
            for a in arms:
                v = a["phases"].get(phase, {}).get(key)
                if isinstance(v, dict):
                    vals.append(v["median"])
                    lo.append(v["median"] - v["min"])
                    hi.append(v["max"] - v["median"])
                else:
                    vals.append(v or 0)
                    lo.append(0)
                    hi.append(0)
            ax.bar(names, vals, yerr=[lo, hi], capsize=3, color="#5b8fc9")
            ax.set_title(f"{phase}: {label}", fontsize=10)
    return save(fig, report, out, "arms.png")


def step_rates(samples, interval_us, index):
    """(t_us, MB/s) per PM record of a step, [t_ns, tx_bytes, rx_bytes] each; one more point closes the last."""
    pts = [(s[0] / 1e3, s[index] / interval_us) for s in samples]  # bytes per us = MB/s
    if pts:
        pts.append((pts[-1][0] + interval_us, pts[-1][1]))
    return pts


def plot_pm_step(report, out):
    """pm_step.png from report["decode_step_pm"]; None when the run has no step recorded with PM."""
    steps = report.get("decode_step_pm")
    if not steps or not steps.get("rows"):
        return None
    rows = steps["rows"]
    rule = steps.get("burst_rule", {})
    fig, axes = plt.subplots(len(rows), 1, figsize=(10, 2.6 * len(rows)), squeeze=False)
    for ax, row in zip(axes[:, 0], rows):
        plot = row["plot"]
        interval = row["interval_us"]
        for index, label in ((1, "tx (GPU sends)"), (2, "rx (GPU receives)")):
            pts = step_rates(plot["samples"], interval, index)
            if pts:
                ax.step([t for t, _ in pts], [v for _, v in pts], where="post", lw=0.8, label=label)
        ax.axvspan(0, plot["step_ns"] / 1e3, color=PHASE_COLORS["decode"], alpha=0.4, label="the step")
        if "threshold_mbps" in rule:
            ax.axhline(rule["threshold_mbps"], color="#888888", lw=0.6, ls=":",
                       label=f"burst threshold ({rule.get('counter', 'tx')})")
        bursts = (row.get("bursts") or {}).get("median")
        calls = (row.get("allreduce_calls_per_step") or {}).get("median")
        what = f"{bursts:g} bursts" if bursts is not None else "bursts N/A"
        what += f", {calls:g} AllReduce calls" if calls is not None else ""
        ax.set_title(f"arm {row['arm']} GPU {row['gpu']}, repetition {plot['repetition'] + 1}: one decode step "
                     f"at {interval} us ({what}, medians)", fontsize=9)
        ax.set_ylabel("PCIe MB/s")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=7, loc="upper right")
    axes[-1, 0].set_xlabel("us from the step's start")
    return save(fig, report, out, "pm_step.png")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--report", required=True, help="report JSON (tpscope report RUN_DIR --format json)")
    p.add_argument("--samples", help="RUN_DIR/samples.jsonl")
    p.add_argument("--out", required=True, help="folder for the PNGs")
    a = p.parse_args()
    try:
        with open(a.report) as f:
            report = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        sys.exit(f"plot_report.py: cannot read {a.report}: {e}")
    os.makedirs(a.out, exist_ok=True)
    paths = [plot_traffic(report, load_samples(a.samples), a.out), plot_arms(report, a.out),
             plot_pm_step(report, a.out)]
    for path in filter(None, paths):
        print(f"plot_report.py: wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
