#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""benchmarks/wires/kl.py - per-token KL divergence and top-1 agreement between two decode runs' logits.

    kl.py steps --ref REF.npy --run RUN.npy --out STEPS.json [--meta KEY=VALUE ...]
    kl.py table STEPS.json|DIR ... [--json OUT]

`steps` compares two runs that decoded the same tokens (the second forced to the first's): REF.npy and
RUN.npy hold each step's logits, float32 [steps][vocab] (`tpscope tp --logits-out`,
benchmarks/wires/hf_llama_kl.py). Per step i, in float64, with p = softmax(REF[i]) and q = softmax(RUN[i]):

    kl[i]        = sum_v p_v (log p_v - log q_v)     KL(p || q), the reference's distribution first;
                                                     rounding can leave it a few 1e-17 below 0: clamped to 0
    top1_ref[i], top1_run[i]                         each run's argmax (the first of equal maxima)
    ref_margin[i] = the reference's largest logit minus its second: how near a tie the top-1 was
    max_abs_diff[i] = max_v |REF[i, v] - RUN[i, v]|
    equal[i]     = the two rows are bitwise equal

A step whose run logits hold a NaN or an infinity gets kl = NaN and counts in nonfinite_steps. The
document (format "tpscope-kl-steps") carries these lists and the --meta pairs (model, dtype, logits,
wire, kind = wire | floor, compared: what against what).

`table` reads such documents (a folder: every *.json in it that is one) and prints one markdown row per
document: mean, median and max KL over the steps, top-1 agreement, bitwise-equal steps, and the ratio of
its mean KL to the floor's (the document of kind "floor" with the same model, dtype and logits: TP=1
against TP=2 exact, the reduction-order difference a user already accepts). A lossy wire whose every step
is bitwise equal to the reference is flagged: its calls did not use the wire. --json writes the rows.

Needs numpy. Exit 0; 1 for a file that cannot be read or does not match (shapes, format); 2 for usage.
"""

import argparse
import glob
import json
import math
import os
import sys

FORMAT = "tpscope-kl-steps"
CHUNK = 16  # steps per float64 pass, so a 128256-token vocabulary stays within a few hundred MB


class KlError(Exception):
    """A file that cannot be read or does not fit: one sentence."""


def log_softmax(x):
    """Row-wise log-softmax of a float64 array (max-shifted, so large logits do not overflow)."""
    import numpy as np
    m = x.max(axis=1, keepdims=True)
    z = x - m
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


def compare(ref, run):
    """The per-step lists (module doc) of two [steps][vocab] arrays of the same shape."""
    import numpy as np
    if ref.ndim != 2 or ref.shape != run.shape:
        raise KlError("the two runs' logits differ in shape: %s and %s (same steps and vocabulary needed)"
                      % (tuple(ref.shape), tuple(run.shape)))
    out = {"kl": [], "top1_ref": [], "top1_run": [], "ref_margin": [], "max_abs_diff": [], "equal": []}
    nonfinite = 0
    for s in range(0, ref.shape[0], CHUNK):
        a = np.asarray(ref[s:s + CHUNK], dtype=np.float64)
        b = np.asarray(run[s:s + CHUNK], dtype=np.float64)
        if not np.isfinite(a).all():
            raise KlError("the reference's logits hold a NaN or an infinity (step %d on)" % s)
        finite = np.isfinite(b).all(axis=1)
        nonfinite += int((~finite).sum())
        lp = log_softmax(a)
        lq = log_softmax(np.where(np.isfinite(b), b, 0.0))
        kl = np.maximum((np.exp(lp) * (lp - lq)).sum(axis=1), 0.0)
        kl = np.where(finite, kl, np.nan)
        top2 = np.partition(a, [-2, -1], axis=1)[:, -2:] if a.shape[1] > 1 else np.concatenate([a, a], axis=1)
        out["kl"] += [float(v) for v in kl]
        out["top1_ref"] += [int(v) for v in a.argmax(axis=1)]
        out["top1_run"] += [int(v) for v in np.where(finite, b.argmax(axis=1), -1)]
        out["ref_margin"] += [float(v) for v in top2[:, 1] - top2[:, 0]]
        out["max_abs_diff"] += [float(v) for v in np.abs(a - b).max(axis=1)]
        out["equal"] += [bool(v) for v in (np.asarray(ref[s:s + CHUNK]) == np.asarray(run[s:s + CHUNK])).all(axis=1)]
    out["nonfinite_steps"] = nonfinite
    return out


def load(path):
    import numpy as np
    try:
        a = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as e:
        raise KlError("cannot read %s as a .npy array (%s)" % (path, e))
    if a.ndim != 2:
        raise KlError("%s holds a %d-dimensional array, not [steps][vocab]" % (path, a.ndim))
    return a


def steps_document(ref_path, run_path, meta):
    doc = {"format": FORMAT, "version": 1, "meta": meta, "ref": ref_path, "run": run_path}
    ref, run = load(ref_path), load(run_path)
    doc.update({"steps": int(ref.shape[0]), "vocab": int(ref.shape[1])})
    doc.update(compare(ref, run))
    return doc


def summarize(doc):
    """One table row of a steps document (without the floor ratio)."""
    kl = [v for v in doc["kl"] if not math.isnan(v)]
    kl_sorted = sorted(kl)
    n = doc["steps"]
    agree = sum(1 for a, b in zip(doc["top1_ref"], doc["top1_run"]) if a == b)
    meta = doc.get("meta", {})
    row = {k: meta.get(k, "") for k in ("model", "dtype", "logits", "kind", "wire", "compared")}
    row.update({"steps": n,
                "mean_kl": sum(kl) / len(kl) if kl else float("nan"),
                "median_kl": kl_sorted[len(kl_sorted) // 2] if kl else float("nan"),
                "max_kl": kl_sorted[-1] if kl else float("nan"),
                "top1_agreement": agree / n if n else float("nan"),
                "equal_steps": sum(1 for e in doc["equal"] if e),
                "nonfinite_steps": doc.get("nonfinite_steps", 0)})
    row["flag"] = ""
    if row["kind"] == "wire" and row["wire"] not in ("", "exact") and row["equal_steps"] == n:
        row["flag"] = "every step bitwise equal to exact: the calls did not use the wire"
    elif row["nonfinite_steps"]:
        row["flag"] = "%d steps with NaN or infinite logits" % row["nonfinite_steps"]
    return row


def table_rows(docs):
    rows = [summarize(d) for d in docs]
    floors = {(r["model"], r["dtype"], r["logits"]): r["mean_kl"] for r in rows if r["kind"] == "floor"}
    for r in rows:
        f = floors.get((r["model"], r["dtype"], r["logits"]))
        r["kl_over_floor"] = r["mean_kl"] / f if f and r["kind"] != "floor" else None
    order = {"floor": 0, "wire": 1}
    wire_order = {"exact": 0, "bf16": 1, "int8": 2, "fp8": 3, "int4": 4}
    rows.sort(key=lambda r: (r["model"], r["dtype"], r["logits"], order.get(r["kind"], 2),
                             wire_order.get(r["wire"], 9)))
    return rows


def fmt(v, spec):
    if v is None:
        return "-"
    if isinstance(v, float) and math.isnan(v):
        return "nan"
    return format(v, spec)


def markdown(rows):
    out = ["| model | dtype | logits | compared | steps | mean KL | median KL | max KL | KL / floor | top-1 agree "
           "| equal steps |",
           "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        out.append("| %s | %s | %s | %s%s | %d | %s | %s | %s | %s | %s | %d |" % (
            r["model"], r["dtype"], r["logits"], r["compared"], " (!)" if r["flag"] else "", r["steps"],
            fmt(r["mean_kl"], ".3e"), fmt(r["median_kl"], ".3e"), fmt(r["max_kl"], ".3e"),
            fmt(r["kl_over_floor"], ".1f"), fmt(100.0 * r["top1_agreement"], ".1f") + " %", r["equal_steps"]))
    flags = ["(!) %s %s %s, %s: %s" % (r["model"], r["dtype"], r["logits"], r["compared"], r["flag"])
             for r in rows if r["flag"]]
    return "\n".join(out + flags) + "\n"


def read_steps(paths):
    docs = []
    for p in paths:
        files = sorted(glob.glob(os.path.join(p, "*.json"))) if os.path.isdir(p) else [p]
        for f in files:
            try:
                with open(f) as fh:
                    d = json.load(fh)
            except (OSError, ValueError) as e:
                if os.path.isdir(p):
                    continue  # a folder may hold other JSON
                raise KlError("cannot read %s (%s)" % (f, e))
            if not isinstance(d, dict) or d.get("format") != FORMAT:
                if os.path.isdir(p):
                    continue
                raise KlError("%s is not a kl.py steps document" % f)
            docs.append(d)
    if not docs:
        raise KlError("no kl.py steps documents in %s" % ", ".join(paths))
    return docs


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("steps", help="compare two runs' logits step by step")
    s.add_argument("--ref", required=True)
    s.add_argument("--run", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--meta", action="append", default=[], metavar="KEY=VALUE")
    t = sub.add_parser("table", help="the table of steps documents")
    t.add_argument("inputs", nargs="+")
    t.add_argument("--json")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "steps":
            try:
                import numpy  # noqa: F401
            except ImportError:
                raise KlError("steps needs numpy, which this Python (%s) lacks: install it (Debian: python3-numpy) "
                              "or run kl.py with a Python that has it" % sys.executable)
            meta = {}
            for kv in args.meta:
                if "=" not in kv:
                    ap.error("--meta takes KEY=VALUE, not %r" % kv)
                k, v = kv.split("=", 1)
                meta[k] = v
            doc = steps_document(args.ref, args.run, meta)
            with open(args.out, "w") as f:
                json.dump(doc, f)
            r = summarize(doc)
            print("%s: mean KL %.3e, max %.3e, top-1 %.1f %%, %d/%d steps bitwise equal"
                  % (meta.get("compared", args.run), r["mean_kl"], r["max_kl"], 100 * r["top1_agreement"],
                     r["equal_steps"], r["steps"]))
        else:
            rows = table_rows(read_steps(args.inputs))
            sys.stdout.write(markdown(rows))
            if args.json:
                with open(args.json, "w") as f:
                    json.dump({"rows": rows}, f, indent=1)
    except KlError as e:
        print("kl.py: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
