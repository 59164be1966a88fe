#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""benchmarks/round/round.py - a GPU round: test and benchmark one box with a build of tpscope, and
compare its figures against the box's baseline.

    benchmarks/round/round.py --out DIR [--budget-s N] [--build DIR] [--steps a,b] [--skip a,b]
                              [--baseline FILE] [--write-baseline FILE]
                              [--llama-server PATH --model GGUF]
    benchmarks/round/round.py --compare RESULTS.jsonl [--baseline FILE]
    benchmarks/round/round.py --list | --self-test

Every step runs with its own time limit (a hang or a crash costs that step, not the round), and a step
whose limit would pass the budget is skipped and says so. Each step's output goes to DIR/<step>/; the
figures it yields go to DIR/results.jsonl (one JSON object a line: name, value, unit, step, command),
the comparison with the baseline to DIR/comparison.txt, and DIR/summary.txt says what ran, what it gave
and what drifted. Without a GPU nothing is measured; --compare still compares a results file.

Exit status: 0 when every step that ran passed and no figure drifted beyond its tolerance, 1 otherwise,
2 for a usage error. README.md beside this file lists the steps and what a round on two GPUs measures.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BASELINES = os.path.join(REPO, "docs", "results", "baselines")


# ---- figures ------------------------------------------------------------------------------------------

def size_name(n):
    """8192 -> '8K', 67108864 -> '64M', 1073741824 -> '1G' (the bench's own size suffixes)."""
    for suffix, unit in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= unit and n % unit == 0:
            return "%d%s" % (n // unit, suffix)
    return str(n)


def bench_figures(step, doc):
    """Figures of a `tpscope bench allreduce -J` document: time per call and bus bandwidth per row."""
    out = []
    for r in doc.get("results", []):
        if r.get("time_us") is None:
            continue
        backend = r["backend"] + ("-procs" if r.get("ranks") == "procs" else "")
        base = "%s.%s.%s.%s" % (step, backend, r.get("dtype", "bfloat16"), size_name(int(r["size_bytes"])))
        out.append((base + ".time_us", float(r["time_us"]), "us"))
        out.append((base + ".busbw_gbps", float(r["busbw_gbps"]), "GB/s"))
    return out


def tp_figures(step, tag, doc):
    """Figures of a `tpscope tp --format json` document. A prefill's name says which attention ran."""
    out = []
    attention = doc.get("config", {}).get("prefill_attention")
    for r in doc.get("results", []):
        name = "%s.%s" % (step, tag)
        if r.get("phase") == "prefill" and attention:
            name += "-" + attention
        out.append((name + ".ms_per_step", float(r["ms_per_step"]), "ms"))
        out.append((name + ".tokens_per_s", float(r["tokens_per_s"]), "tok/s"))
        if r.get("share_of_roofline") is not None:
            out.append((name + ".share_of_roofline", float(r["share_of_roofline"]), "ratio"))
    return out


def meter_figures(step, doc):
    """Figures of meter_accuracy's JSON: meter bytes / payload (median) on the counters that carry a copy."""
    out = []
    for r in doc.get("accuracy", []):
        if not r.get("carrier") or not r.get("ratio") or r["ratio"].get("median") is None:
            continue
        case = re.sub(r"[^A-Za-z0-9]+", "-", r["case"]).strip("-")
        out.append(("%s.%s.gpu%d.%s.ratio" % (step, case, r["gpu"], r["counter"]), float(r["ratio"]["median"]), "ratio"))
    return out


def speedups(step, figures):
    """tp-split: one GPU's ms per step over the tensor split's, per preset, as `<preset>-speedup`."""
    ms = {n: v for n, v, _ in figures if n.endswith(".ms_per_step")}
    out = []
    for name, v in sorted(ms.items()):
        m = re.match(r"%s\.(\w+)-tensor-(\w+)\.ms_per_step$" % re.escape(step), name)
        one = ms.get("%s.%s-none.ms_per_step" % (step, m.group(1))) if m else None
        if m and one and v > 0:
            out.append(("%s.%s-tensor-%s.speedup" % (step, m.group(1), m.group(2)), one / v, "x"))
    return out


# ---- baseline comparison ------------------------------------------------------------------------------

class UsageError(Exception):
    pass


def read_jsonl(path, required):
    """The JSON objects of a .jsonl file (blank lines and lines starting with '#' skipped)."""
    rows = []
    try:
        with open(path) as f:
            for i, line in enumerate(f, 1):
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                try:
                    row = json.loads(line)
                except ValueError as e:
                    raise UsageError("%s line %d is not JSON (%s)" % (path, i, e))
                missing = [k for k in required if k not in row]
                if missing:
                    raise UsageError("%s line %d lacks %s" % (path, i, ", ".join(missing)))
                if not isinstance(row["value"], (int, float)):
                    raise UsageError("%s line %d: value is not a number" % (path, i))
                rows.append(row)
    except OSError as e:
        raise UsageError("cannot read %s (%s)" % (path, e.strerror))
    return rows


def compare(baseline, results):
    """One verdict per baseline figure: (name, base, now, drift, tolerance, verdict, unit).

    drift = now / base - 1. A figure beyond its tolerance (a fraction of the baseline) is 'DRIFT' with
    'worse' or 'better' where the baseline says which way is better; one the results lack is 'missing'.
    """
    now = {r["name"]: float(r["value"]) for r in results}
    rows = []
    for b in baseline:
        base = float(b["value"])
        tol = float(b["tolerance"])
        if b["name"] not in now:
            rows.append((b["name"], base, None, None, tol, "missing", b.get("unit", "")))
            continue
        v = now[b["name"]]
        drift = v / base - 1 if base else (0.0 if v == 0 else float("inf"))
        verdict = "ok"
        if abs(drift) > tol:
            verdict = "DRIFT"
            better = b.get("better")
            if better in ("lower", "higher"):
                verdict += " (%s)" % ("better" if (drift < 0) == (better == "lower") else "worse")
        rows.append((b["name"], base, v, drift, tol, verdict, b.get("unit", "")))
    return rows


def format_comparison(rows, baseline_path):
    lines = ["# against %s: drift = now / baseline - 1; tolerance as a fraction of the baseline" % baseline_path,
             "%-58s %12s %12s %9s %6s  %s" % ("figure", "baseline", "now", "drift", "tol", "verdict")]
    for name, base, v, drift, tol, verdict, unit in rows:
        now = "-" if v is None else "%.4g" % v
        d = "-" if drift is None else "%+.1f%%" % (100 * drift)
        lines.append("%-58s %12s %12s %9s %5.0f%%  %s" % (name, "%.4g %s" % (base, unit), now, d, 100 * tol, verdict))
    drifted = sum(1 for r in rows if r[5].startswith("DRIFT"))
    missing = sum(1 for r in rows if r[5] == "missing")
    lines.append("%d figure(s) compared: %d within tolerance, %d drifted, %d not measured" %
                 (len(rows), len(rows) - drifted - missing, drifted, missing))
    return "\n".join(lines) + "\n", drifted


# Tolerances a written baseline starts with, by unit: timings drift more than link-byte ratios.
DEFAULT_TOLERANCE = {"us": 0.10, "GB/s": 0.05, "ms": 0.03, "tok/s": 0.05, "x": 0.03, "ratio": 0.02}
BETTER = {"us": "lower", "ms": "lower", "GB/s": "higher", "tok/s": "higher", "x": "higher"}


def baseline_lines(results):
    out = []
    for r in results:
        row = {"name": r["name"], "command": r.get("command", ""), "value": r["value"], "unit": r["unit"],
               "tolerance": DEFAULT_TOLERANCE.get(r["unit"], 0.05)}
        if r["unit"] in BETTER:
            row["better"] = BETTER[r["unit"]]
        out.append(json.dumps(row))
    return "\n".join(out) + "\n"


# ---- the box ------------------------------------------------------------------------------------------

def gpus():
    """(names, reason): the GPUs nvidia-smi lists, or [] and why there are none."""
    if not shutil.which("nvidia-smi"):
        return [], "nvidia-smi not found"
    try:
        p = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                           text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return [], "nvidia-smi did not answer in 60 s"
    names = [line.strip() for line in p.stdout.splitlines() if line.strip()]
    if p.returncode != 0 or not names:
        return [], (p.stderr.strip() or p.stdout.strip() or "nvidia-smi lists no GPU").splitlines()[0]
    return names, ""


def box_name(names):
    """'h200' for one NVIDIA H200, 'h200x2' for two: the baseline's file name for this box."""
    if not names:
        return ""
    slug = re.sub(r"[^a-z0-9]", "", names[0].lower().replace("nvidia", ""))
    return slug + ("x%d" % len(names) if len(names) > 1 else "")


# ---- steps --------------------------------------------------------------------------------------------

class Run:
    """One command of a step: its tag, argv, extra environment and time limit."""

    def __init__(self, tag, argv, limit_s, env=None, json_out=None, stdout_json=False):
        self.tag, self.argv, self.limit_s = tag, argv, limit_s
        self.env = env or {}
        self.json_out = json_out  # where the command writes its JSON record, if it does
        self.stdout_json = stdout_json  # the command prints its JSON record on stdout


def bench_run(tag, out, args, limit_s, env=None):
    path = os.path.join(out, tag + ".json")
    return Run(tag, ["{bin}", "bench", "allreduce"] + args + ["-J", path], limit_s, env, json_out=path)


def steps(ngpu, o):
    """The steps of a round on a box of ngpu GPUs, in order: (name, min_gpus, runs(out), figures(out, runs))."""
    devs = ",".join(str(i) for i in range(max(ngpu, 1)))
    two = ngpu >= 2

    def bench_step(name, backends, extra, limit_s, env=None):
        def runs(out):
            return [bench_run(name, out, ["--devices", devs, "--backend", backends] + extra, limit_s, env)]
        return (name, 2, runs, lambda out, rs: bench_figures(name, load_json(rs[0].json_out)))

    def tp_step(name, min_gpus, cases):
        def runs(out):
            return [Run(tag, ["{bin}", "tp"] + args + ["--format", "json"], 120, stdout_json=True) for tag, args in cases]

        def figures(out, rs):
            f = []
            for r in rs:
                f += tp_figures(name, r.tag, load_json(os.path.join(out, r.tag + ".json")))
            return f + speedups(name, f)
        return (name, min_gpus, runs, figures)

    split = []
    for preset, tokens in (("8b", "128"), ("32b", "64")):
        d = ["--preset", preset, "--phase", "decode", "--ctx", "4096", "--tokens", tokens]
        split.append((preset + "-none", d + ["--split", "none", "--devices", "0"]))
        for b in (("p2p", "nccl", "host") if preset == "8b" else ("p2p",)):
            split.append(("%s-tensor-%s" % (preset, b), d + ["--split", "tensor", "--devices", devs, "--backend", b]))

    lib = os.path.join(o.build, "lib", "libtpscope.so")
    arms_out = lambda out: os.path.join(out, "four-arms-quick")  # noqa: E731
    s = [
        ("ctest", 1, lambda out: [Run("ctest", ["ctest", "--test-dir", o.build, "-L",
                                                "^(gpu|multigpu)$" if two else "^gpu$", "--output-on-failure",
                                                "--timeout", "300"], 1200)], None),
        bench_step("bench-small", "p2p,nccl,host", ["-b", "8K", "-e", "256K", "-f", "2", "-d", "bf16", "--graph",
                                                    "-n", "200"], 120),
        bench_step("bench-sweep", "auto,p2p,nccl,host", ["-b", "8K", "-e", "1G", "-f", "2", "-d", "bf16", "--graph",
                                                         "-n", "20"], 300),
        bench_step("bench-host", "host,nccl", ["-b", "8K", "-e", "256M", "-f", "2", "-d", "bf16", "-c", "1", "-n",
                                               "100", "-w", "10"], 240, {"NCCL_P2P_DISABLE": "1"}),
        bench_step("bench-nccl-symm", "nccl,nccl-symm", ["-b", "8K", "-e", "1G", "-f", "4", "-d", "bf16", "--graph",
                                                         "-n", "20"], 200),
        # With one GPU both ranks share it (--procs takes GPUs 0..N-1 of those there are).
        ("procs", 1, lambda out: [bench_run("procs", out, ["--procs", "2", "--backend", "p2p,host", "-b", "8K", "-e",
                                                           "16M", "-f", "4", "-n", "20", "-w", "5"], 180)],
         lambda out, rs: bench_figures("procs", load_json(rs[0].json_out))),
        ("torch", 1, lambda out: [Run("torch", [sys.executable, os.path.join(REPO, "python/examples/torch_allreduce.py"),
                                                "--nranks", "2"], 180, {"TPSCOPE_LIBRARY": lib})], None),
        tp_step("tp-decode", 1, [("8b-none", ["--preset", "8b", "--phase", "decode"])]),
        tp_step("tp-split", 2, split),
        tp_step("tp-prefill", 1, [("8b-p4096", ["--preset", "8b", "--phase", "prefill", "--prompt", "4096"])]),
        ("meter", 1, lambda out: [Run("meter", [os.path.join(o.build, "bin", "meter_accuracy"), "--reps", "3",
                                                "--sections", "accuracy,own", "--json",
                                                os.path.join(out, "meter_accuracy.json")], 300,
                                      json_out=os.path.join(out, "meter_accuracy.json"))],
         lambda out, rs: meter_figures("meter", load_json(rs[0].json_out))),
        ("arms", 2, lambda out: [Run("arms", ["{bin}", "arms", os.path.join(REPO, "examples/four-arms.toml"), "--quick",
                                              "--out", arms_out(out)], 300),
                                 Run("report", ["{bin}", "report", arms_out(out)], 60)], None),
    ]
    if o.llama_server and o.model:
        s.append(("llama", 2, lambda out: [Run("llama", ["{bin}", "arms", llama_spec(out, o.model), "--out",
                                                         os.path.join(out, "llama-x2-arms")], 1200,
                                               {"TPSCOPE_LLAMA_SERVER": o.llama_server})], None))
    s.append(("tune", 2, lambda out: [Run("tune", ["{bin}", "bench", "allreduce", "--tune", "--devices", devs], 400,
                                          {"TPSCOPE_TUNE_FILE": os.path.join(out, "tune.json")})], None))
    return s


# Steps a plain round leaves out: tune rewrites what `auto` picks, so it runs only when asked for.
OPT_IN = {"tune"}


def llama_spec(out, model):
    """A copy of examples/llama-x2-arms.toml that loads MODEL."""
    with open(os.path.join(REPO, "examples/llama-x2-arms.toml")) as f:
        text = f.read()
    text = re.sub(r'(?m)^model = .*$', 'model = "%s"' % os.path.abspath(model), text)
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "llama-x2-arms.toml")
    with open(path, "w") as f:
        f.write(text)
    return path


def load_json(path):
    with open(path) as f:
        return json.load(f)


# ---- the round ----------------------------------------------------------------------------------------

class Round:
    def __init__(self, o):
        self.o = o
        self.t0 = time.monotonic()
        self.lines = []
        self.failed = []
        self.skipped = []
        self.results = []

    def say(self, text):
        print(text, flush=True)
        self.lines.append(text)

    def elapsed(self):
        return time.monotonic() - self.t0

    def run(self, step, run, out, tpscope):
        """Runs one command under its time limit; False when it fails, times out or cannot start.

        The command gets a process group of its own, so a time-out ends whatever it started too
        (ctest's test binaries, the arms' servers)."""
        argv = [tpscope if a == "{bin}" else a for a in run.argv]
        env = dict(os.environ, **run.env)
        env.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink SHARP stays off: it changes what NCCL is measured on
        shown = " ".join(["%s=%s" % kv for kv in run.env.items()] + argv)
        t = time.monotonic()
        stdout = stderr = b""
        try:
            p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=REPO,
                                 start_new_session=True)
            try:
                stdout, stderr = p.communicate(timeout=run.limit_s)
                rc, why = p.returncode, "exit %d" % p.returncode
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, 9)
                stdout, stderr = p.communicate()
                rc, why = 124, "timed out after %d s" % run.limit_s
        except OSError as e:
            rc, why = 127, "could not start (%s)" % e.strerror
        with open(os.path.join(out, run.tag + ".log"), "wb") as f:
            f.write(("== %s\n" % shown).encode() + stdout + stderr)
        if run.stdout_json and rc == 0:
            with open(os.path.join(out, run.tag + ".json"), "wb") as f:
                f.write(stdout)
        self.say("  %-22s %-18s %5.0f s  %s" % (step + "/" + run.tag, why, time.monotonic() - t, shown[:90]))
        if rc != 0:
            self.failed.append("%s/%s (%s)" % (step, run.tag, why))
        return rc == 0

    def measure(self, ngpu):
        o = self.o
        tpscope = os.path.join(o.build, "bin", "tpscope")
        all_steps = steps(ngpu, o)
        names = [s[0] for s in all_steps]
        chosen = o.steps.split(",") if o.steps else [n for n in names if n not in OPT_IN]
        chosen = [n for n in chosen if n not in (o.skip.split(",") if o.skip else [])]
        unknown = [n for n in chosen if n not in names]
        if unknown:
            raise UsageError("unknown step(s) %s (--list shows them)" % ", ".join(unknown))
        for name, min_gpus, runs, figures in all_steps:
            if name not in chosen:
                continue
            if ngpu < min_gpus:
                self.say("skipped %s: needs %d GPUs, this box has %d" % (name, min_gpus, ngpu))
                self.skipped.append(name)
                continue
            if name == "torch" and subprocess.run([sys.executable, "-c", "import torch"],
                                                  capture_output=True).returncode != 0:
                self.say("skipped torch: python3 cannot import torch")
                self.skipped.append(name)
                continue
            out = os.path.join(o.out, name)
            rs = runs(out)
            need = sum(r.limit_s for r in rs)
            if self.elapsed() + need > o.budget_s:
                self.say("skipped %s: its %d s of limits would pass the budget (%.0f of %d s used)" %
                         (name, need, self.elapsed(), o.budget_s))
                self.skipped.append(name)
                continue
            os.makedirs(out, exist_ok=True)
            self.say("== %s" % name)
            passed = [r for r in rs if self.run(name, r, out, tpscope)]
            if figures and passed:
                # A figure's command is its own run's (the run tag is the name's second part), else the step's first.
                cmds = {r.tag: " ".join("tpscope" if a == "{bin}" else a for a in r.argv) for r in passed}
                try:
                    for fname, value, unit in figures(out, passed):
                        cmd = cmds.get(fname.split(".")[1], cmds[passed[0].tag])
                        self.results.append({"name": fname, "value": value, "unit": unit, "step": name, "command": cmd})
                except (OSError, ValueError, KeyError) as e:
                    self.failed.append("%s (its record could not be read: %s)" % (name, e))
                    self.say("  %s: its record could not be read (%s)" % (name, e))


def baseline_for(names, given):
    if given:
        return given
    path = os.path.join(BASELINES, box_name(names) + ".jsonl")
    return path if names and os.path.exists(path) else ""


def finish(r, baseline_path, results, measured=True):
    """Writes the comparison and the summary; the exit status."""
    o = r.o
    drifted = 0
    if baseline_path:
        text, drifted = format_comparison(compare(read_jsonl(baseline_path, ("name", "value", "tolerance")), results),
                                          os.path.relpath(baseline_path, REPO) if baseline_path.startswith(REPO)
                                          else baseline_path)
        r.say(text.rstrip())
        if o.out:
            with open(os.path.join(o.out, "comparison.txt"), "w") as f:
                f.write(text)
    else:
        r.say("no baseline for this box: nothing compared (--baseline FILE, or --write-baseline to make one)")
    if r.skipped:
        r.say("skipped: %s" % ", ".join(r.skipped))
    verdict = "FAILED: " + "; ".join(r.failed) if r.failed else "every step that ran passed"
    if not measured:
        verdict = "compared %s" % o.compare
    r.say("round: " + verdict + ("; %d figure(s) drifted beyond tolerance" % drifted if drifted else
                                 "; no figure drifted beyond its tolerance" if baseline_path else ""))
    if o.out:
        with open(os.path.join(o.out, "summary.txt"), "w") as f:
            f.write("\n".join(r.lines) + "\n")
    return 1 if r.failed or drifted else 0


def main(argv):
    p = argparse.ArgumentParser(description="A GPU round: tests and benchmarks of one box, compared against its "
                                "baseline (benchmarks/round/README.md).")
    p.add_argument("--out", help="folder for the round's logs, records, results.jsonl and summary.txt")
    p.add_argument("--budget-s", type=int, default=3600, help="seconds the whole round may take (default 3600)")
    p.add_argument("--build", default=os.path.join(REPO, "build"), help="the build folder (default build)")
    p.add_argument("--steps", help="comma-separated steps to run (default: all but tune; --list shows them)")
    p.add_argument("--skip", help="comma-separated steps to leave out")
    p.add_argument("--baseline", help="baseline to compare against (default docs/results/baselines/<box>.jsonl)")
    p.add_argument("--compare", metavar="RESULTS", help="compare a results.jsonl against the baseline; measure nothing")
    p.add_argument("--write-baseline", metavar="FILE", help="write the round's figures as a baseline for this box")
    p.add_argument("--llama-server", help="llama-server for the llama step (scripts/llama/build-llama-server)")
    p.add_argument("--model", help="GGUF for the llama step (scripts/llama/make-gguf)")
    p.add_argument("--list", action="store_true", help="list the steps and exit")
    p.add_argument("--self-test", action="store_true", help="check the figure parsers and the comparison; no GPU")
    o = p.parse_args(argv)
    if o.self_test:
        return self_test()
    if o.budget_s <= 0:
        p.error("--budget-s must be positive")
    if o.list:
        for name, min_gpus, runs, _ in steps(2, o):
            limit = sum(r.limit_s for r in runs(tempfile.gettempdir()))
            print("%-16s needs %d GPU(s), limit %4d s%s" % (name, min_gpus, limit,
                                                              "  (only with --steps)" if name in OPT_IN else ""))
        return 0
    o.build = os.path.abspath(o.build)
    r = Round(o)
    try:
        if o.compare:
            if o.out:
                os.makedirs(o.out, exist_ok=True)
            results = read_jsonl(o.compare, ("name", "value"))
            names, why = gpus()
            if not names:
                r.say("round: no GPU here (%s): nothing is measured; comparing %s" % (why, o.compare))
            base = baseline_for(names, o.baseline)
            if not base:
                raise UsageError("--compare needs --baseline FILE here (no baseline matches this box)")
            return finish(r, base, results, measured=False)
        if not o.out:
            p.error("--out DIR is required for a round (or --compare RESULTS, --list, --self-test)")
        os.makedirs(o.out, exist_ok=True)
        names, why = gpus()
        if not names:
            r.say("round: no GPU here (%s): nothing is measured (--compare RESULTS compares a round's "
                  "results.jsonl without one)" % why)
            with open(os.path.join(o.out, "summary.txt"), "w") as f:
                f.write("\n".join(r.lines) + "\n")
            return 1
        version = subprocess.run([os.path.join(o.build, "bin", "tpscope"), "--version"], capture_output=True, text=True)
        r.say("round on %d GPU(s): %s | %s | budget %d s" % (len(names), ", ".join(names),
                                                              (version.stdout or version.stderr).strip() or "no tpscope",
                                                              o.budget_s))
        r.measure(len(names))
        with open(os.path.join(o.out, "results.jsonl"), "w") as f:
            f.writelines(json.dumps(x) + "\n" for x in r.results)
        if o.write_baseline:
            with open(o.write_baseline, "w") as f:
                f.write(baseline_lines(r.results))
            r.say("wrote %d figure(s) to %s" % (len(r.results), o.write_baseline))
        return finish(r, baseline_for(names, o.baseline), r.results)
    except UsageError as e:
        print("round: error: %s" % e, file=sys.stderr)
        return 2


# ---- self-test ----------------------------------------------------------------------------------------

def self_test():
    """Checks the parsers on records of the shapes tpscope writes and the comparison's verdicts."""
    failures = []

    def check(what, cond):
        if not cond:
            failures.append(what)

    bench = {"results": [{"backend": "p2p", "dtype": "bfloat16", "size_bytes": 8192, "time_us": 2.22, "busbw_gbps": 3.69},
                         {"backend": "host", "ranks": "procs", "dtype": "bfloat16", "size_bytes": 1 << 30,
                          "time_us": 30713.0, "busbw_gbps": 34.96}]}
    f = dict((n, v) for n, v, _ in bench_figures("bench-small", bench))
    check("bench figure by backend and size", f.get("bench-small.p2p.bfloat16.8K.time_us") == 2.22)
    check("a process-per-rank row is named apart", "bench-small.host-procs.bfloat16.1G.busbw_gbps" in f)
    tp = {"config": {"prefill_attention": "cudnn"},
          "results": [{"phase": "prefill", "ms_per_step": 100.0, "tokens_per_s": 40000.0, "share_of_roofline": None}]}
    check("a prefill figure names its attention",
          [n for n, _, _ in tp_figures("tp-prefill", "8b-p4096", tp)][0] == "tp-prefill.8b-p4096-cudnn.ms_per_step")
    split = [("tp-split.8b-none.ms_per_step", 4.124, "ms"), ("tp-split.8b-tensor-p2p.ms_per_step", 2.388, "ms")]
    sp = speedups("tp-split", split)
    check("speedup = one GPU / tensor", len(sp) == 1 and abs(sp[0][1] - 4.124 / 2.388) < 1e-9)
    meter = {"accuracy": [{"case": "p2p 1GiB 0->1", "gpu": 1, "counter": "nvlink_rx", "carrier": True,
                           "ratio": {"median": 1.0}},
                          {"case": "d2h 1GiB", "gpu": 0, "counter": "pcie_rx", "carrier": False, "ratio": {"median": 0.1}}]}
    check("meter figures are the carrying counters only",
          [n for n, _, _ in meter_figures("meter", meter)] == ["meter.p2p-1GiB-0-1.gpu1.nvlink_rx.ratio"])
    check("size names", [size_name(n) for n in (8192, 1 << 26, 1 << 30, 3000)] == ["8K", "64M", "1G", "3000"])
    check("box names", box_name(["NVIDIA H200"] * 2) == "h200x2" and box_name(["NVIDIA H200"]) == "h200")

    base = [{"name": "a", "value": 10.0, "tolerance": 0.05, "better": "lower", "unit": "us"},
            {"name": "b", "value": 100.0, "tolerance": 0.05, "better": "higher", "unit": "GB/s"},
            {"name": "c", "value": 1.0, "tolerance": 0.02, "unit": "ratio"},
            {"name": "d", "value": 5.0, "tolerance": 0.1}]
    now = [{"name": "a", "value": 10.4}, {"name": "b", "value": 90.0}, {"name": "c", "value": 0.97}]
    v = {row[0]: row[5] for row in compare(base, now)}
    check("within tolerance is ok", v["a"] == "ok")
    check("a lower bandwidth is worse", v["b"] == "DRIFT (worse)")
    check("a drift without a better side", v["c"] == "DRIFT")
    check("a figure not measured is missing", v["d"] == "missing")
    check("faster is better", compare(base[:1], [{"name": "a", "value": 8.0}])[0][5] == "DRIFT (better)")
    text, drifted = format_comparison(compare(base, now), "x")
    check("the comparison counts the drifted", drifted == 2 and "1 within tolerance, 2 drifted, 1 not measured" in text)

    with tempfile.TemporaryDirectory() as d:
        bad = os.path.join(d, "bad.jsonl")
        with open(bad, "w") as fh:
            fh.write('{"name": "a", "value": "fast", "tolerance": 0.1}\n')
        try:
            read_jsonl(bad, ("name", "value", "tolerance"))
            check("a value that is not a number is refused", False)
        except UsageError:
            pass
        good = os.path.join(d, "r.jsonl")
        with open(good, "w") as fh:
            fh.write("# a comment\n\n" + json.dumps(now[0]) + "\n")
        check("comments and blank lines are skipped", len(read_jsonl(good, ("name", "value"))) == 1)

    # The shipped baselines: well formed, every figure sourced from a file in the tree, and where the
    # source is a record this tool parses, the baseline's value is the one the parser reads there.
    for path in sorted(os.listdir(BASELINES)) if os.path.isdir(BASELINES) else []:
        if not path.endswith(".jsonl"):
            continue
        full = os.path.join(BASELINES, path)
        try:
            rows = read_jsonl(full, ("name", "command", "value", "unit", "tolerance", "source"))
        except UsageError as e:
            check(str(e), False)
            continue
        for row in rows:
            src = os.path.join(REPO, row["source"])
            check("%s: %s's source %s exists" % (path, row["name"], row["source"]), os.path.exists(src))
            parsed = source_figures(row["name"].split(".")[0], src) if os.path.exists(src) else None
            if parsed is not None and not row["name"].endswith(".speedup"):
                check("%s: %s = %s in %s" % (path, row["name"], row["value"], row["source"]),
                      row["name"] in parsed and abs(parsed[row["name"]] - row["value"]) <= 5e-4 * abs(row["value"]))
    for f in failures:
        print("round self-test: FAILED: %s" % f)
    print("round self-test: %s" % ("%d check(s) failed" % len(failures) if failures else "all checks passed"))
    return 1 if failures else 0


def source_figures(step, path):
    """The figures this tool reads from a kept record (a bench or tp JSON, meter_accuracy's JSON), by name;
    None for a source it does not parse (a text log)."""
    if not path.endswith(".json"):
        return None
    doc = load_json(path)
    if "accuracy" in doc:
        return dict((n, v) for n, v, _ in meter_figures(step, doc))
    if "config" in doc:
        tag = os.path.basename(path)[:-len(".json")]
        return dict((n, v) for n, v, _ in tp_figures(step, tag, doc))
    return dict((n, v) for n, v, _ in bench_figures(step, doc))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
