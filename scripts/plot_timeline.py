#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""plot_timeline.py - the PM-sampling timeline of `tpscope meter --source pm --timeline FILE`.

  --out DIR     timeline.png: PCIe tx/rx MB/s per record over each window's time (us from its
                start), one panel per window and GPU (the first --max-panels of them), the bursts
                shaded.
  --bursts      prints, per window and GPU, the bursts: the meter labels each record with the burst
                it belongs to (`tpscope meter --burst-rule`, default tx:1024:25: records above 1024
                MB/s on tx, merged across dips shorter than 25 us; src/meter/pm_bursts.h), and this
                counts the labels; with --steps N, bursts per step beside the count. JSON with --json.
  --window NAME only windows of this name.

Usage: plot_timeline.py FILE [--window NAME] [--out DIR] [--bursts [--steps N] [--json OUT]]
The plot needs matplotlib (Debian: python3-matplotlib); --bursts needs nothing but Python.
Exit 0 on success, 1 on bad input.
"""
import argparse
import json
import os
import sys
from collections import OrderedDict


def load(path, window=None):
    """({(window, repetition, gpu): [record, ...]} in file order (time order per key), the burst rule)."""
    groups = OrderedDict()
    rule = None
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: not JSON ({e})")
            if r.get("type") == "timeline_rule":
                rule = r
            if r.get("type") != "timeline" or (window and r.get("window") != window):
                continue
            if "burst" not in r:
                raise ValueError(f"{path}:{n}: a record without its burst: write the timeline again with this tpscope")
            groups.setdefault((r["window"], r["repetition"], r["gpu"]), []).append(r)
    return groups, rule


def rate_mbps(r, key):
    dur = r.get("dur_us") or 0
    return r[key] / dur if dur > 0 else 0.0  # bytes per us = MB/s


def bursts(records):
    """[(start_us, end_us, tx_bytes, rx_bytes)] of each burst the meter labelled, in label order."""
    out = OrderedDict()
    for r in records:
        b = r["burst"]
        if b is None:
            continue
        t0, t1 = r["t_us"], r["t_us"] + r["dur_us"]
        cur = out.setdefault(b, [t0, t1, 0.0, 0.0])
        cur[1] = t1
        cur[2] += r["pcie_tx_bytes"]
        cur[3] += r["pcie_rx_bytes"]
    return [tuple(v) for v in out.values()]


def plot(groups, out_dir, max_panels):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = list(groups)[:max_panels]
    fig, axes = plt.subplots(len(keys), 1, figsize=(12, 2.6 * len(keys)), squeeze=False)
    for ax, key in zip(axes[:, 0], keys):
        recs = groups[key]
        t = [r["t_us"] for r in recs]
        for b in bursts(recs):
            ax.axvspan(b[0], b[1], color="0.85", lw=0)
        ax.step(t, [rate_mbps(r, "pcie_tx_bytes") for r in recs], where="post", label="tx (GPU sends)", lw=0.8)
        ax.step(t, [rate_mbps(r, "pcie_rx_bytes") for r in recs], where="post", label="rx (GPU receives)", lw=0.8)
        ax.set_title(f"{key[0]} #{key[1]}  GPU {key[2]}  (shaded: the meter's bursts)", fontsize=9)
        ax.set_ylabel("MB/s")
        ax.legend(fontsize=7, loc="upper right")
    axes[-1, 0].set_xlabel("us since the window's start")
    fig.tight_layout()
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "timeline.png")
    fig.savefig(path, dpi=110)
    return path


def self_test():
    """Bursts are the meter's labels: a dip merged into a burst stays in it, a record outside none."""
    recs, t = [], 0.0
    for burst in range(30):
        for k in range(10):  # 3 records in a burst, one of them a dip; 7 outside
            recs.append({"t_us": t, "dur_us": 10.0, "pcie_tx_bytes": 20480.0 if k != 1 else 512.0,
                         "pcie_rx_bytes": 40960.0, "burst": burst if k < 3 else None})
            t += 10.0
    got = bursts(recs)
    ok = len(got) == 30 and got[0][:2] == (0.0, 30.0) and got[0][2] == 2 * 20480.0 + 512.0
    print(f"plot_timeline self-test: {len(got)} bursts, the first {got[0]}; want 30, the first (0.0, 30.0, 41472.0, ...)")
    return 0 if ok else 1


def main(argv):
    if argv == ["--self-test"]:
        return self_test()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("timeline")
    ap.add_argument("--out")
    ap.add_argument("--window")
    ap.add_argument("--max-panels", type=int, default=6)
    ap.add_argument("--bursts", action="store_true")
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    try:
        groups, rule = load(a.timeline, a.window)
    except (OSError, ValueError, KeyError) as e:
        print(f"plot_timeline: {e}", file=sys.stderr)
        return 1
    if not groups:
        print("plot_timeline: no timeline records" + (f" of window {a.window}" if a.window else ""), file=sys.stderr)
        return 1
    summary = []
    if a.bursts:
        if rule:
            print(f"# bursts as the meter labelled them: above {rule['threshold_mbps']:g} MB/s on {rule['direction']}, "
                  f"merged across dips shorter than {rule['min_gap_us']:g} us")
        for (w, rep, gpu), recs in groups.items():
            b = bursts(recs)
            row = {"window": w, "repetition": rep, "gpu": gpu, "rule": rule, "records": len(recs), "bursts": len(b),
                   "burst_tx_bytes": sum(x[2] for x in b), "burst_rx_bytes": sum(x[3] for x in b)}
            if a.steps:
                row["bursts_per_step"] = len(b) / a.steps
            summary.append(row)
            per = f", {row['bursts_per_step']:.2f} per step" if a.steps else ""
            print(f"{w} #{rep} GPU {gpu}: {len(recs)} records, {len(b)} bursts{per}")
        if a.json:
            with open(a.json, "w") as f:
                json.dump(summary, f, indent=1)
    if a.out:
        try:
            print(plot(groups, a.out, a.max_panels))
        except ImportError:
            print("plot_timeline: matplotlib is not installed (python3-matplotlib); no plot", file=sys.stderr)
            return 1 if not a.bursts else 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
