#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""scripts/trace_summary.py - where a host copy-path AllReduce call's time goes, from a cupti_trace
timeline (benchmarks/cupti_trace.cc) of calls of two ranks with one round each.

    scripts/trace_summary.py TRACE.jsonl [--chunk-bytes B] [--chunks K] [--json]
    scripts/trace_summary.py --self-test

The trace's copies of B bytes are the calls' chunks, K per rank and call, in order on each stream. Per
call: its length from the first D2H to the end of the add after the last H2D; how long each H2D started
after the peer's D2H of the same chunk ended (the cost of the wait that orders them); the gaps between a
rank's D2H chunks; the tail from the last H2D to the add's end.
"""

import argparse
import json
import statistics
import sys


def load(path):
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


def per_call(recs, chunk_bytes, chunks):
    """Per call of a two-rank host copy-path trace: its length from the first D2H to the last add, the
    wait of each H2D after the peer's D2H of the same chunk, the gaps between D2H chunks, the tail."""
    copies = [r for r in recs if r["kind"] == "memcpy" and r["bytes"] == chunk_bytes]
    d2h_streams = sorted({r["stream"] for r in copies if r["dir"] == "DtoH"})
    h2d_streams = sorted({r["stream"] for r in copies if r["dir"] == "HtoD"})
    if len(d2h_streams) != 2 or len(h2d_streams) != 2:
        raise SystemExit("trace_summary: expected two D2H and two H2D streams of %d-byte chunks" % chunk_bytes)
    on = lambda s, d: sorted((r for r in copies if r["stream"] == s and r["dir"] == d), key=lambda r: r["start_ns"])
    d2h = [on(s, "DtoH") for s in d2h_streams]
    h2d = [on(s, "HtoD") for s in h2d_streams]
    adds = sorted((r for r in recs if r["kind"] == "kernel" and "ddPeers" in r["name"]), key=lambda r: r["end_ns"])
    calls = min(len(d) for d in d2h + h2d) // chunks
    rows = []
    for c in range(calls):
        dc = [d[c * chunks:(c + 1) * chunks] for d in d2h]
        hc = [h[c * chunks:(c + 1) * chunks] for h in h2d]
        t0 = min(d[0]["start_ns"] for d in dc)
        last_h2d = max(h[-1]["end_ns"] for h in hc)
        ends = [a["end_ns"] for a in adds if a["end_ns"] >= last_h2d]
        t1 = min(ends) if ends else last_h2d
        # rank r's H2D carries the other rank's chunks (two ranks: its D2H stream is the other one)
        waits = [(h["start_ns"] - dc[1 - r][k]["end_ns"]) / 1e3 for r, hs in enumerate(hc) for k, h in enumerate(hs)]
        gaps = [(d[k + 1]["start_ns"] - d[k]["end_ns"]) / 1e3 for d in dc for k in range(len(d) - 1)]
        rows.append({"length_us": (t1 - t0) / 1e3, "h2d_wait_median_us": statistics.median(waits),
                     "h2d_wait_max_us": max(waits), "d2h_gap_median_us": statistics.median(gaps) if gaps else 0.0,
                     "tail_us": (t1 - last_h2d) / 1e3})
    return rows


def show(rows):
    print("# per call: length from the first D2H to the add after the last H2D; H2D start after the peer's D2H "
          "of that chunk (median, max); gap between D2H chunks (median); from the last H2D to the add's end (us)")
    print("%6s %10s %10s %10s %10s %8s" % ("call", "length", "h2d_wait", "h2d_max", "d2h_gap", "tail"))
    for i, r in enumerate(rows):
        print("%6d %10.1f %10.1f %10.1f %10.1f %8.1f" % (i, r["length_us"], r["h2d_wait_median_us"],
                                                     r["h2d_wait_max_us"], r["d2h_gap_median_us"], r["tail_us"]))
    for key in ("length_us", "h2d_wait_median_us", "d2h_gap_median_us"):
        print("# median %s over the calls after the first: %.1f" %
              (key, statistics.median(r[key] for r in rows[1:] or rows)))


def self_test():
    recs = []
    # Two calls of two ranks, two chunks each: rank 0's D2H on stream 1, rank 1's on 2; H2D on 3 (rank 0,
    # the chunks of rank 1) and 4 (rank 1, the chunks of rank 0); adds on 5 and 6.
    for c in range(2):
        base = c * 1000
        for k in range(2):
            recs.append({"kind": "memcpy", "dir": "DtoH", "bytes": 64, "start_ns": base + 100 * k,
                         "end_ns": base + 100 * k + 90, "device": 0, "stream": 1})
            recs.append({"kind": "memcpy", "dir": "DtoH", "bytes": 64, "start_ns": base + 200 + 100 * k,
                         "end_ns": base + 200 + 100 * k + 90, "device": 0, "stream": 2})
            recs.append({"kind": "memcpy", "dir": "HtoD", "bytes": 64, "start_ns": base + 200 + 100 * k + 95,
                         "end_ns": base + 200 + 100 * k + 180, "device": 0, "stream": 3})
            recs.append({"kind": "memcpy", "dir": "HtoD", "bytes": 64, "start_ns": base + 100 * k + 100,
                         "end_ns": base + 100 * k + 190, "device": 0, "stream": 4})
        for st in (5, 6):
            recs.append({"kind": "kernel", "name": "addPeers", "start_ns": base + 480, "end_ns": base + 520,
                         "device": 0, "stream": st})
    rows = per_call(recs, 64, 2)
    ok = len(rows) == 2 and all(abs(r["length_us"] - 0.52) < 1e-9 for r in rows)
    ok = ok and all(abs(r["h2d_wait_median_us"] - 0.0075) < 1e-9 for r in rows)
    ok = ok and all(abs(r["d2h_gap_median_us"] - 0.01) < 1e-9 for r in rows)
    # A broken trace (one rank's H2D missing) is refused, not summarized.
    broken = [r for r in recs if r["stream"] != 4]
    try:
        per_call(broken, 64, 2)
        ok = False
    except SystemExit:
        pass
    print("trace_summary self-test:", "ok" if ok else "FAILED %s" % rows)
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace", nargs="?")
    ap.add_argument("--chunk-bytes", type=int, default=4 << 20, help="the calls' chunk size (4 MiB at 32 MiB)")
    ap.add_argument("--chunks", type=int, default=8, help="chunks per rank and call")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    if not a.trace:
        ap.error("give a trace file")
    rows = per_call(load(a.trace), a.chunk_bytes, a.chunks)
    if a.json:
        json.dump(rows, sys.stdout, indent=1)
    else:
        show(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
