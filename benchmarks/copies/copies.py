#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""copies.py - known-size copies between pinned host memory and one GPU, one meter window per case.

Run under `tpscope meter` (it marks each case through TPSCOPE_METER_PIPE; PyTorch makes the copies), then
read the meter's JSON back with --summarize: bytes / payload per window, for each source.

  tpscope meter -i 0 --source both --pm-interval-us 100 --format json -- python3 benchmarks/copies/copies.py > both.json
  python3 benchmarks/copies/copies.py --summarize both.json

Cases (--cases):
  pm     (default) 4 x 1 GiB H2D, 4 x 1 GiB D2H, 4096 x 64 KiB H2D, 4096 x 64 KiB D2H, each window with
         20 ms idle guards inside it, --reps 2 times, then 2 s idle (window "idle"): docs/results/h200-pm.
  serve  1 GiB D2H, 1 GiB H2D, 4000 copies of 8-64 KiB D2H and H2D, --reps 3 times; with --scrape PORT OUT,
         the meter's /metrics at 127.0.0.1:PORT is read right before and after each window and written to
         OUT as JSON (`tpscope meter --serve 127.0.0.1:PORT -- python3 copies.py --cases serve --scrape
         PORT scrapes.json`): docs/results/h200-serve.

Options: --device N (CUDA ordinal inside the process, default 0), --reps N, --guard-ms MS (20).
--summarize FILE needs nothing but Python. Exit 0 on success, 1 on a failure, 2 on a usage error.
"""
import argparse
import json
import os
import sys
import time
import urllib.request

GIB = 1 << 30
KIB = 1 << 10


def cases(kind):
    """[(name, direction, [bytes per copy, ...])]; direction h2d (the GPU receives) or d2h (it sends)."""
    if kind == "pm":
        return [("h2d_4x1GiB", "h2d", [GIB] * 4), ("d2h_4x1GiB", "d2h", [GIB] * 4),
                ("h2d_4096x64KiB", "h2d", [64 * KIB] * 4096), ("d2h_4096x64KiB", "d2h", [64 * KIB] * 4096)]
    small = [(8 + (i % 8) * 8) * KIB for i in range(4000)]  # 8, 16, ..., 64 KiB in turn
    return [("d2h_1GiB", "d2h", [GIB]), ("h2d_1GiB", "h2d", [GIB]), ("d2h_4000x8-64KiB", "d2h", small),
            ("h2d_4000x8-64KiB", "h2d", small)]


class Marks:
    """The meter's control pipe (src/meter/control.h): one line per mark."""

    def __init__(self):
        path = os.environ.get("TPSCOPE_METER_PIPE")
        if not path:
            raise SystemExit("copies.py: TPSCOPE_METER_PIPE is not set: run it under `tpscope meter ... -- python3 copies.py`")
        self.pipe = open(path, "w", buffering=1)

    def mark(self, what, name):
        self.pipe.write(f"{what} {name}\n")
        self.pipe.flush()


def scrape(port):
    """The meter's counters now: {"name{labels}": value} of every sample line."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def run(a):
    import torch  # the GPU side only: --summarize needs no torch

    dev = torch.device("cuda", a.device)
    largest = max(max(sizes) for _, _, sizes in cases(a.cases))
    host = torch.empty(largest, dtype=torch.uint8, pin_memory=True)
    gpu = torch.empty(largest, dtype=torch.uint8, device=dev)
    stream = torch.cuda.Stream(dev)
    marks = Marks()
    scrapes = []
    guard = a.guard_ms / 1000
    for rep in range(a.reps):
        for name, direction, sizes in cases(a.cases):
            before = scrape(a.scrape[0]) if a.scrape else None
            marks.mark("begin", name)
            time.sleep(guard)  # the window's edges fall in idle time
            with torch.cuda.stream(stream):
                for n in sizes:
                    if direction == "h2d":
                        gpu[:n].copy_(host[:n], non_blocking=True)
                    else:
                        host[:n].copy_(gpu[:n], non_blocking=True)
            stream.synchronize()
            time.sleep(guard)
            marks.mark("end", name)
            if a.scrape:
                time.sleep(0.1)  # past the meter's next read of the link
                scrapes.append({"case": name, "repetition": rep, "direction": direction, "payload_bytes": sum(sizes),
                                "before": before, "after": scrape(a.scrape[0])})
    if a.cases == "pm":
        marks.mark("begin", "idle")
        time.sleep(2)
        marks.mark("end", "idle")
    if a.scrape:
        with open(a.scrape[1], "w") as f:
            json.dump(scrapes, f, indent=1)
    return 0


def summarize(path, kind):
    """bytes / payload of each case's windows, the first source's and every other's beside it."""
    with open(path) as f:
        doc = json.load(f)
    payload = {name: (direction, sum(sizes)) for name, direction, sizes in cases(kind)}
    rows = []
    for w in doc.get("windows", []):
        if w["name"] not in payload:
            continue
        direction, total = payload[w["name"]]
        counters = w["gpus"][0]["counters"]["pcie_rx" if direction == "h2d" else "pcie_tx"]
        row = {"case": w["name"], "repetition": w["repetition"], "complete": w["complete"],
               "bytes_per_payload": counters["bytes"] / total if counters["bytes"] is not None else None}
        for key, value in counters.items():  # the sources beside the first: pm_bytes, nvml_bytes, ...
            beside = key.endswith("_bytes") and key not in ("counted_bytes", "own_bytes") and \
                not key.endswith(("_counted_bytes", "_own_bytes", "_edge_bytes"))
            if beside and value is not None:
                row[key[:-len("_bytes")] + "_per_payload"] = value / total
        rows.append(row)
    first = doc.get("context", {}).get("options", {}).get("source", "nvml")
    print(f"# bytes / payload per window; the first source's figure, then the others' (options source: {first})")
    for r in rows:
        extra = "  ".join(f"{k} {v:.4f}" for k, v in r.items() if k.endswith("_per_payload") and k != "bytes_per_payload")
        main = f"{r['bytes_per_payload']:.4f}" if r["bytes_per_payload"] is not None else "N/A"
        print(f"{r['case']:<18} rep {r['repetition']}  bytes/payload {main}  {extra}  complete {r['complete']}")
    return 0 if rows else 1


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", choices=["pm", "serve"], default="pm")
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--reps", type=int)
    ap.add_argument("--guard-ms", type=float, default=20)
    ap.add_argument("--scrape", nargs=2, metavar=("PORT", "OUT"))
    ap.add_argument("--summarize", metavar="METER_JSON")
    a = ap.parse_args(argv)
    if a.reps is None:
        a.reps = 2 if a.cases == "pm" else 3
    if a.summarize:
        return summarize(a.summarize, a.cases)
    return run(a)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
