#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""scripts/trace_summary.py - where one host copy-path AllReduce call's time goes, from a cupti_trace
timeline (benchmarks/cupti_trace.cc).

    scripts/trace_summary.py TRACE.jsonl [--adds-per-call N] [--json]
    scripts/trace_summary.py --self-test

The last call of the trace is the copies and kernels after the previous call's add kernels ended, up to the
end of its own last add kernel (a call ends with one add kernel per rank and round: --adds-per-call, default
2). Printed: the call's length; per stream, each copy and kernel with its start and end from the call's
start in us and the stream's idle time between them; per direction, the bytes and the time the link carried
them (union of busy intervals); the wait between a chunk's D2H ending and the H2D of the same chunk on the
other streams starting.
"""

import argparse
import json
import sys


def load(path):
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


def is_add(r):
    return r["kind"] == "kernel" and ("addPeers" in r["name"] or "wireAddPeers" in r["name"])


def last_call(recs, adds_per_call):
    adds = sorted((r for r in recs if is_add(r)), key=lambda r: r["end_ns"])
    if len(adds) < adds_per_call:
        raise SystemExit("trace_summary: fewer than %d add kernels in the trace" % adds_per_call)
    end = adds[-1]["end_ns"]
    start = adds[-1 - adds_per_call]["end_ns"] if len(adds) > adds_per_call else min(r["start_ns"] for r in recs)
    return [r for r in recs if r["start_ns"] >= start and r["end_ns"] <= end], start, end


def busy(intervals):
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def summarize(recs, adds_per_call):
    call, start, end = last_call(recs, adds_per_call)
    t0 = min([r["start_ns"] for r in call] + [end])
    out = {"call_us": (end - t0) / 1e3, "streams": {}, "directions": {}, "h2d_waits_us": []}
    by_stream = {}
    for r in call:
        by_stream.setdefault(r["stream"], []).append(r)
    for s, rs in sorted(by_stream.items()):
        rs.sort(key=lambda r: r["start_ns"])
        idle = sum(max(0, b["start_ns"] - a["end_ns"]) for a, b in zip(rs, rs[1:]))
        out["streams"][s] = {
            "ops": [{"what": r.get("dir", "kernel"), "bytes": r.get("bytes"), "start_us": (r["start_ns"] - t0) / 1e3,
                     "end_us": (r["end_ns"] - t0) / 1e3} for r in rs],
            "idle_between_us": idle / 1e3}
    for d in ("DtoH", "HtoD"):
        iv = [(r["start_ns"], r["end_ns"]) for r in call if r.get("dir") == d]
        out["directions"][d] = {"bytes": sum(r["bytes"] for r in call if r.get("dir") == d),
                                "busy_us": busy(iv) / 1e3}
    d2h = sorted((r for r in call if r.get("dir") == "DtoH"), key=lambda r: r["end_ns"])
    h2d = sorted((r for r in call if r.get("dir") == "HtoD"), key=lambda r: r["start_ns"])
    # The k-th H2D of a stream carries the peer's k-th chunk: its wait is its start after that D2H's end.
    per_stream_d2h, per_stream_h2d = {}, {}
    for r in d2h:
        per_stream_d2h.setdefault(r["stream"], []).append(r)
    for r in h2d:
        per_stream_h2d.setdefault(r["stream"], []).append(r)
    d2h_streams = sorted(per_stream_d2h)
    for hs, rs in per_stream_h2d.items():
        for k, r in enumerate(rs):
            ends = [per_stream_d2h[ds][k]["end_ns"] for ds in d2h_streams if k < len(per_stream_d2h[ds])]
            if ends:
                out["h2d_waits_us"].append((r["start_ns"] - max(ends)) / 1e3)
    return out


def show(s):
    print("# call: %.1f us" % s["call_us"])
    for d, v in s["directions"].items():
        print("# %s: %d bytes, link busy %.1f us (%.2f GB/s while busy)" %
              (d, v["bytes"], v["busy_us"], v["bytes"] / max(v["busy_us"], 1e-9) / 1e3))
    w = s["h2d_waits_us"]
    if w:
        print("# H2D start after the chunk's last D2H end: min %.1f, median %.1f, max %.1f us over %d copies" %
              (min(w), sorted(w)[len(w) // 2], max(w), len(w)))
    for st, v in s["streams"].items():
        print("# stream %s: idle between ops %.1f us" % (st, v["idle_between_us"]))
        for o in v["ops"]:
            print("  %-6s %10s %9.1f -> %9.1f us" % (o["what"], o["bytes"] if o["bytes"] else "", o["start_us"],
                                                    o["end_us"]))


def self_test():
    recs = []
    # Two ranks, one round of two chunks: D2H on streams 1 and 2, H2D on 3 and 4, adds on 5 and 6.
    for st, base in ((1, 0), (2, 5)):
        recs += [{"kind": "memcpy", "dir": "DtoH", "bytes": 100, "start_ns": base, "end_ns": base + 100,
                  "device": 0, "stream": st},
                 {"kind": "memcpy", "dir": "DtoH", "bytes": 100, "start_ns": base + 100, "end_ns": base + 200,
                  "device": 0, "stream": st}]
    for st in (3, 4):
        recs += [{"kind": "memcpy", "dir": "HtoD", "bytes": 100, "start_ns": 130, "end_ns": 230, "device": 0,
                  "stream": st},
                 {"kind": "memcpy", "dir": "HtoD", "bytes": 100, "start_ns": 230, "end_ns": 330, "device": 0,
                  "stream": st}]
    recs += [{"kind": "kernel", "name": "addPeers", "start_ns": 330, "end_ns": 400, "device": 0, "stream": 5},
             {"kind": "kernel", "name": "addPeers", "start_ns": 330, "end_ns": 410, "device": 0, "stream": 6}]
    s = summarize(recs, 2)
    ok = abs(s["call_us"] - 0.41) < 1e-9 and s["directions"]["DtoH"]["bytes"] == 400
    ok = ok and abs(s["directions"]["DtoH"]["busy_us"] - 0.205) < 1e-9
    ok = ok and sorted(s["h2d_waits_us"]) == [0.025, 0.025, 0.025, 0.025]
    print("trace_summary self-test:", "ok" if ok else "FAILED %s" % s)
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace", nargs="?")
    ap.add_argument("--adds-per-call", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    if not a.trace:
        ap.error("give a trace file")
    s = summarize(load(a.trace), a.adds_per_call)
    if a.json:
        json.dump(s, sys.stdout, indent=1)
    else:
        show(s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
