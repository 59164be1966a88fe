#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""scripts/device/x2_summary.py RAW_DIR NGPU - the figures of scripts/device/x2-round.sh's raw files that the
two-GPU issue asks for, in a few lines each; parts whose files are missing are left out.

  bench: per size, each backend's time (us) eager and graph, p2p / nccl-symm (target <= 0.8 at 8-256 KiB),
         busbw of p2p against nccl and nccl-symm from 64 MiB (target >= nccl's), wrong elements, and what
         NCCL said it picked (its TUNING lines, per size) and registered (REG lines)
  tp:    tokens/s of each preset, tensor over one GPU (target >= 1.7x)
  meter: peer-copy bytes / payload (target 0.99-1.05x) and the idle rows with and without NVLink
"""
import glob
import json
import os
import re
import sys

raw, ngpu = sys.argv[1], int(sys.argv[2])


def load(path):
    try:
        with open(path) as f:
            text = f.read()
        # The document starts at a line of its own; log lines before it may hold braces.
        start = 0 if text.startswith("{") else text.index("\n{") + 1
        return json.loads(text[start:text.rindex("}") + 1])
    except (OSError, ValueError):
        return None


def size_text(b):
    for unit, n in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= n and b % n == 0:
            return f"{b // n}{unit}"
    return str(b)


def bench():
    docs = {m: load(f"{raw}/bench-{m}.json") for m in ("eager", "graph")}
    if not any(docs.values()):
        return
    print("== bench allreduce, bf16, time(us) per call (busbw GB/s from 64M); #wrong over all rows")
    for mode, doc in docs.items():
        if not doc:
            print(f"{mode}: no JSON")
            continue
        ctx = doc["context"]
        symm = ctx.get("nccl_symm")
        if symm and not symm.get("available"):
            print(f"{mode}: nccl-symm N/A: {symm.get('reason')}")
        if doc.get("error"):
            print(f"{mode}: stopped early: {doc['error']}")
        rows = doc["results"]
        backends = [b for b in ctx["backends"]]
        t = {(r["backend"], r["size_bytes"]): r for r in rows}
        sizes = sorted({r["size_bytes"] for r in rows})
        wrong = sum(r["n_wrong"] or 0 for r in rows)
        print(f"{mode}: {len(rows)} rows, {wrong} wrong elements; backends {', '.join(backends)}")
        print("  size " + " ".join(f"{b:>10}" for b in backends) + "  p2p/symm  p2p/nccl")
        for s in sizes:
            cells = []
            for b in backends:
                r = t.get((b, s))
                v = "-" if not r else (f"{r['busbw_gbps']:.1f}G" if s >= 64 << 20 else f"{r['time_us']:.2f}")
                cells.append(f"{v:>10}")
            ratio = lambda a, b: (f"{t[(a, s)]['time_us'] / t[(b, s)]['time_us']:.3f}"
                                  if (a, s) in t and (b, s) in t else "-")
            print(f"{size_text(s):>6} " + " ".join(cells) + f"  {ratio('p2p', 'nccl-symm'):>8}  {ratio('p2p', 'nccl'):>8}")
        small = [t[("p2p", s)]["time_us"] / t[("nccl-symm", s)]["time_us"] for s in sizes
                 if 8 << 10 <= s <= 256 << 10 and ("p2p", s) in t and ("nccl-symm", s) in t]
        if small:
            print(f"  target p2p <= 0.8x nccl-symm at 8-256K: worst {max(small):.3f} "
                  f"({'met' if max(small) <= 0.8 else 'NOT met'})")
        for ref in ("nccl", "nccl-symm"):
            big = [(s, t[("p2p", s)]["busbw_gbps"], t[(ref, s)]["busbw_gbps"]) for s in sizes
                   if s >= 64 << 20 and ("p2p", s) in t and (ref, s) in t]
            if big:
                short = [f"{size_text(s)} {p:.0f}<{n:.0f}" for s, p, n in big if p < n]
                print(f"  target p2p busbw >= {ref} from 64M: {'met' if not short else 'NOT met at ' + ', '.join(short)}")
        if symm and symm.get("nccl_estimates"):
            est = ", ".join(f"{size_text(e['size_bytes'])} {e['estimated_us']:.1f}" for e in symm["nccl_estimates"][:6]
                            if e.get("estimated_us") is not None)
            print(f"  NCCL's own estimate for nccl-symm (us): {est} ...")
    for mode in ("eager", "graph"):
        path = f"{raw}/nccl-choice-{mode}.txt"
        if not os.path.exists(path):
            continue
        seen = []
        for line in open(path, errors="replace"):
            if "TUNING" in line or re.search(r"Algo|[Ss]ymmetric|[Kk]ernel", line):
                text = re.sub(r"^.*?NCCL INFO ", "", line.strip())
                text = re.sub(r"0x[0-9a-f]+", "0x..", text)
                if text not in seen:
                    seen.append(text)
        print(f"NCCL's choice ({mode}; {path}): {len(seen)} distinct lines")
        for text in seen[:24]:
            print("  " + text)
    for path in sorted(glob.glob(f"{raw}/nccl-bench-*.txt")):
        reg = sorted({re.sub(r"^.*?NCCL INFO ", "", l.strip()) for l in open(path, errors="replace")
                      if re.search(r"[Rr]egist|[Ww]indow|[Ss]ymmetric|NVLS", l)})
        print(f"{os.path.basename(path)}: {len(reg)} distinct registration/NVLS lines")
        for text in reg[:10]:
            print("  " + text)


def tp():
    lines = []
    for preset in ("8b", "32b"):
        res = {}
        for split in ("none", "tensor"):
            doc = load(f"{raw}/tp-{preset}-{split}.log")
            dec = [r for r in (doc or {}).get("results", []) if r.get("phase") == "decode"]
            if dec:
                res[split] = dec[0]["tokens_per_s"]
        if res:
            speed = f"{res['tensor'] / res['none']:.2f}x" if len(res) == 2 else "-"
            lines.append(f"tp {preset} decode ctx 4096: one GPU {res.get('none', '-')} tok/s, tensor over {ngpu} "
                         f"{res.get('tensor', '-')} tok/s: {speed} (target >= 1.7x, aim 1.8x)")
    if lines:
        print("== tp")
        print("\n".join(lines))


def meter():
    doc = load(f"{raw}/meter_accuracy.json")
    if doc:
        print("== meter_accuracy (meter bytes / payload; target 0.99-1.05 for peer copies)")
        acc = doc.get("accuracy")
        for row in acc if isinstance(acc, list) else []:
            if row.get("carrier"):
                r = row.get("ratio") or {}
                print(f"  {row['case']}: GPU {row['gpu']} {row['counter']}: median {r.get('median')} "
                      f"[{r.get('min')} - {r.get('max')}]")
        for row in doc.get("own_traffic", []):
            print(f"  own: {row['config']}{' + NVLink' if row.get('nvlink_thread') else ''} GPU {row['gpu']} "
                  f"{row['counter']}: counted {row['counted_mbps']}, own {row['own_mbps']}, net {row['net_mbps']} MB/s")
    for path in sorted(glob.glob(f"{raw}/idle-*.log")):
        rows = [l.rstrip() for l in open(path) if l.strip() and not l.startswith(("==", "   exit"))]
        print(f"  {os.path.basename(path)}, last rows:")
        for row in rows[-(2 * ngpu + 1):]:
            print("    " + row)


for part in (bench, tp, meter):
    try:
        part()
    except Exception as e:  # one part's surprise must not hide the others
        print(f"{part.__name__}: summary failed: {e!r}")
