#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""plot_timeline.py - the PM-sampling timeline of `tpscope meter --source pm --timeline FILE`.

  --out DIR     timeline.png: PCIe tx/rx MB/s per record over each window's time (us from its
                start), one panel per window and GPU (the first --max-panels of them).
  --bursts      prints, per window and GPU, the bursts: runs of records above --threshold-mbps
                (in the direction --counter names: tx, rx or either) separated by at least
                --min-gap-us of records below it; with --steps N, bursts per step beside the count.
                JSON with --json. On the host backend's kernel path pcie_rx carries the waiting
                ranks' flag polls without a pause, so its AllReduces show as bursts on tx alone.
  --window NAME only windows of this name.

Usage: plot_timeline.py FILE [--out DIR] [--bursts [--steps N] [--counter tx|rx|either] [--threshold-mbps X]
                                                [--min-gap-us G]]
The plot needs matplotlib (Debian: python3-matplotlib); --bursts needs nothing but Python.
Exit 0 on success, 1 on bad input.
"""
import argparse
import json
import os
import sys
from collections import OrderedDict


def load(path, window=None):
    """{(window, repetition, gpu): [record, ...]} in file order (time order per key)."""
    groups = OrderedDict()
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: not JSON ({e})")
            if r.get("type") != "timeline" or (window and r.get("window") != window):
                continue
            groups.setdefault((r["window"], r["repetition"], r["gpu"]), []).append(r)
    return groups


def rate_mbps(r, key):
    dur = r.get("dur_us") or 0
    return r[key] / dur if dur > 0 else 0.0  # bytes per us = MB/s


COUNTERS = {"tx": ("pcie_tx_bytes",), "rx": ("pcie_rx_bytes",), "either": ("pcie_tx_bytes", "pcie_rx_bytes")}


def bursts(records, threshold_mbps, min_gap_us, counter="either"):
    """[(start_us, end_us, tx_bytes, rx_bytes)]: runs above the threshold, merged across short dips.

    src/meter/pm_bursts.cc counts by the same rule for `tpscope arms`; a change here belongs there too."""
    out = []
    cur = None
    for r in records:
        busy = max(rate_mbps(r, key) for key in COUNTERS[counter]) > threshold_mbps
        t0, t1 = r["t_us"], r["t_us"] + r["dur_us"]
        if busy:
            if cur and t0 - cur[1] < min_gap_us:
                cur[1] = t1
                cur[2] += r["pcie_tx_bytes"]
                cur[3] += r["pcie_rx_bytes"]
            else:
                if cur:
                    out.append(tuple(cur))
                cur = [t0, t1, r["pcie_tx_bytes"], r["pcie_rx_bytes"]]
    if cur:
        out.append(tuple(cur))
    return out


def plot(groups, out_dir, max_panels):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = list(groups)[:max_panels]
    fig, axes = plt.subplots(len(keys), 1, figsize=(12, 2.6 * len(keys)), squeeze=False)
    for ax, key in zip(axes[:, 0], keys):
        recs = groups[key]
        t = [r["t_us"] for r in recs]
        ax.step(t, [rate_mbps(r, "pcie_tx_bytes") for r in recs], where="post", label="tx (GPU sends)", lw=0.8)
        ax.step(t, [rate_mbps(r, "pcie_rx_bytes") for r in recs], where="post", label="rx (GPU receives)", lw=0.8)
        ax.set_title(f"{key[0]} #{key[1]}  GPU {key[2]}", fontsize=9)
        ax.set_ylabel("MB/s")
        ax.legend(fontsize=7, loc="upper right")
    axes[-1, 0].set_xlabel("us since the window's start")
    fig.tight_layout()
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "timeline.png")
    fig.savefig(path, dpi=110)
    return path


def self_test():
    """Bursts on tx while rx never rests (the host kernel path's polls): 'tx' counts them, 'either' cannot."""
    recs, t = [], 0.0
    for burst in range(30):
        for k in range(10):  # 3 records busy on tx, 7 quiet; rx busy all along
            tx = 20480.0 if k < 3 else 512.0
            recs.append({"t_us": t, "dur_us": 10.0, "pcie_tx_bytes": tx, "pcie_rx_bytes": 40960.0})
            t += 10.0
    got = {c: len(bursts(recs, 1024.0, 25.0, c)) for c in COUNTERS}
    want = {"tx": 30, "rx": 1, "either": 1}
    print(f"plot_timeline self-test: bursts {got}, want {want}")
    return 0 if got == want else 1


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
    ap.add_argument("--counter", choices=sorted(COUNTERS), default="either")
    ap.add_argument("--threshold-mbps", type=float, default=200.0)
    ap.add_argument("--min-gap-us", type=float, default=15.0)
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    try:
        groups = load(a.timeline, a.window)
    except (OSError, ValueError, KeyError) as e:
        print(f"plot_timeline: {e}", file=sys.stderr)
        return 1
    if not groups:
        print("plot_timeline: no timeline records" + (f" of window {a.window}" if a.window else ""), file=sys.stderr)
        return 1
    summary = []
    if a.bursts:
        for (w, rep, gpu), recs in groups.items():
            b = bursts(recs, a.threshold_mbps, a.min_gap_us, a.counter)
            row = {"window": w, "repetition": rep, "gpu": gpu, "counter": a.counter, "threshold_mbps": a.threshold_mbps,
                   "min_gap_us": a.min_gap_us, "records": len(recs), "bursts": len(b),
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
