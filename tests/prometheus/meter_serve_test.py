#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`tpscope meter --serve` end to end on scripted GPUs (TPSCOPE_METER_FAKE=1 with a script).

  meter_serve_test.py TPSCOPE prometheus   a real Prometheus (Debian's `prometheus`) scrapes the meter
                                           every second; increase() over the run must equal the bytes the
                                           script moved, per GPU and direction, across a meter restart
  meter_serve_test.py TPSCOPE format       one scrape passes `promtool check metrics`; names, labels, types
  meter_serve_test.py TPSCOPE faults       port in use, bad addresses, malformed, slow and many concurrent
                                           scrapes, SIGTERM during scrapes: one clear line, no crash,
                                           bounded threads, exit 0 on SIGTERM

Without prometheus/promtool the test fails, or under TPSCOPE_TEST_LENIENT=1 exits 77 (skipped).
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request

TPSCOPE = sys.argv[1] if len(sys.argv) > 1 else "build/bin/tpscope"
MODE = sys.argv[2] if len(sys.argv) > 2 else "prometheus"
TMP = tempfile.mkdtemp(prefix="tpscope_serve_")
KIDS = []


class Fail(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Fail(what)


def tool(name):
    path = os.environ.get(name.upper()) or shutil.which(name)
    if path:
        return path
    if os.environ.get("TPSCOPE_TEST_LENIENT") == "1":
        print(f"skipped: no {name} (scripts/setup installs Debian's prometheus)")
        sys.exit(77)
    raise Fail(f"no {name} on PATH: scripts/setup installs Debian's prometheus (TPSCOPE_TEST_LENIENT=1 skips)")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_script(gpus, epoch=None):
    path = os.path.join(TMP, "script.json")
    body = {"gpus": gpus}
    if epoch is not None:
        body["epoch_unix_s"] = epoch
    with open(path, "w") as f:
        json.dump(body, f)
    return path


class Meter:
    """A `tpscope meter --serve` process; stderr goes to a file."""

    def __init__(self, serve, script, extra=()):
        self.err_path = os.path.join(TMP, f"meter{len(KIDS)}.err")
        env = dict(os.environ, TPSCOPE_METER_FAKE="1", TPSCOPE_METER_FAKE_SCRIPT=script)
        self.err = open(self.err_path, "w")
        self.p = subprocess.Popen([TPSCOPE, "meter", "--serve", serve, *extra], env=env,
                                  stdout=subprocess.DEVNULL, stderr=self.err)
        KIDS.append(self.p)

    def wait_serving(self, timeout=15):
        end = time.time() + timeout
        while time.time() < end:
            text = self.stderr()
            if "serving the meter's counters at http://" in text:
                return int(text.split("/metrics")[0].rsplit(":", 1)[1])
            if self.p.poll() is not None:
                raise Fail(f"the meter exited ({self.p.returncode}) before serving: {text.strip()}")
            time.sleep(0.05)
        raise Fail("the meter did not start serving within %d s" % timeout)

    def stderr(self):
        with open(self.err_path) as f:
            return f.read()

    def term(self, timeout=10):
        self.p.send_signal(signal.SIGTERM)
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            raise Fail("the meter did not exit within %d s of SIGTERM" % timeout)

    def status(self, key):  # "Threads", "VmRSS" (kB) from /proc/PID/status
        with open(f"/proc/{self.p.pid}/status") as f:
            return int(next(l for l in f if l.startswith(key + ":")).split()[1])

    def threads(self):
        return self.status("Threads")


def scrape(port, timeout=5):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as r:
        return r.headers.get("Content-Type"), r.read().decode()


def samples(text):
    """{(name, frozenset(labels)): value} from the text format (enough for our own output)."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, value = line.rsplit(" ", 1)
        name, labels = (head.split("{", 1) + [""])[:2]
        pairs = []
        for part in labels.rstrip("}").split('",') if labels else []:
            k, v = part.split('="', 1)
            pairs.append((k, v.rstrip('"')))
        out[(name, frozenset(pairs))] = float(value)
    return out


def by_gpu(parsed, name):
    return {dict(k[1])["gpu"]: v for k, v in parsed.items() if k[0] == name}


# ---- prometheus: increase() against the scripted bytes, across a restart --------------------------
# Two bursts of known bytes, flat (no traffic) around them; the meter restarts in the flat gap between.
BURSTS = [(3.0, 5.0), (10.0, 12.0)]  # seconds after the epoch
RATES = {  # per GPU: per burst, bytes/s of each counter
    "0": [{"pcie_rx": 1.0e9, "pcie_tx": 0.4e9, "nvlink_tx": 2.0e9}, {"pcie_rx": 0.5e9, "pcie_tx": 1.2e9}],
    "1": [{"pcie_rx": 0.3e9, "pcie_tx": 0.7e9, "nvlink_rx": 2.0e9}, {"pcie_rx": 0.9e9, "pcie_tx": 0.2e9}],
}


def scripted_gpus():
    gpus = []
    for gpu in ("0", "1"):
        bursts = []
        for (a, b), rates in zip(BURSTS, RATES[gpu]):
            bursts += [{"counter": c, "from_s": a, "to_s": b, "bytes_per_s": r} for c, r in rates.items()]
        gpus.append({"name": "Fake H200", "bursts": bursts,
                     "pcie_link": {"gen_current": 5 if gpu == "0" else 4, "gen_max": 5,
                                   "width_current": 16, "width_max": 16}})
    return gpus


def expected(gpu, counter):
    return sum(r.get(counter, 0) * (b - a) for (a, b), r in zip(BURSTS, RATES[gpu]))


def prom_query(pport, query, at):
    url = f"http://127.0.0.1:{pport}/api/v1/query?" + urllib.parse.urlencode({"query": query, "time": f"{at:.3f}"})
    with urllib.request.urlopen(url, timeout=10) as r:
        body = json.load(r)
    check(body.get("status") == "success", f"Prometheus query {query} failed: {body}")
    return body["data"]["result"]


def run_prometheus():
    prometheus = tool("prometheus")
    mport, pport = free_port(), free_port()
    cfg = os.path.join(TMP, "prometheus.yml")
    with open(cfg, "w") as f:
        f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n"
                f"scrape_configs:\n  - job_name: tpscope\n    static_configs:\n      - targets: ['127.0.0.1:{mport}']\n")
    prom_log = open(os.path.join(TMP, "prometheus.log"), "w")
    prom = subprocess.Popen([prometheus, f"--config.file={cfg}", f"--storage.tsdb.path={TMP}/tsdb",
                             f"--web.listen-address=127.0.0.1:{pport}", "--log.level=warn"],
                            stdout=prom_log, stderr=subprocess.STDOUT)
    KIDS.append(prom)
    t_start = time.time()
    # Prometheus opens its TSDB, then hands targets to its scrapers at most every 5 s: wait for its first
    # scrape attempt of the (not yet started) meter, so the meter's first second is scraped.
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{pport}/api/v1/targets", timeout=1) as r:
                targets = json.load(r)["data"]["activeTargets"]
            if targets and not targets[0]["lastScrape"].startswith("0001"):
                break
        except OSError:
            pass
        check(prom.poll() is None and time.time() < t_start + 30, "Prometheus did not scrape its target within 30 s")
        time.sleep(0.1)
    epoch = time.time() + 0.5
    script = write_script(scripted_gpus(), epoch)
    a = Meter(f"127.0.0.1:{mport}", script)
    a.wait_serving()
    while not prom_query(pport, "tpscope_pcie_rx_bytes_total", time.time()):  # the first scrape
        check(time.time() < epoch + BURSTS[0][0] - 0.2, "Prometheus did not scrape the meter before the first burst")
        time.sleep(0.1)
    # The restart, in the flat gap between the bursts: SIGTERM ends the first (exit 0), a second meter
    # on the same port counts from 0 again, which Prometheus must read as a counter reset.
    gap = (BURSTS[0][1] + BURSTS[1][0]) / 2
    time.sleep(max(0, epoch + gap - 1.0 - time.time()))
    check(a.term() == 0, "SIGTERM: the meter must exit 0")
    b = Meter(f"127.0.0.1:{mport}", script)
    b.wait_serving()
    check(time.time() < epoch + BURSTS[1][0] - 0.5, "the restarted meter took too long to start (the burst began)")
    time.sleep(max(0, epoch + BURSTS[1][1] + 2.5 - time.time()))  # two scrapes after the last burst
    at = time.time()
    b.term()

    results = {}
    for counter in ("pcie_rx", "pcie_tx", "nvlink_rx", "nvlink_tx"):
        metric = f"tpscope_{counter}_bytes_total"
        for series in prom_query(pport, f"{metric}[60s]", at):
            gpu = series["metric"]["gpu"]
            for label in ("uuid", "bus_id", "instance", "job"):
                check(label in series["metric"], f"{metric} has no {label} label: {series['metric']}")
            first, last = float(series["values"][0][0]), float(series["values"][-1][0])
            check(first < epoch + BURSTS[0][0] and last > epoch + BURSTS[1][1],
                  f"{metric}{{gpu={gpu}}}: the scrapes do not cover both bursts ({first - epoch:.1f} .. {last - epoch:.1f} s)")
            # Evaluated at the last scrape over a range 1 ms longer than first..last: increase() then
            # extrapolates by 1 ms only (~1e-4 of the total), whatever the scrape phase.
            rng = f"{int(round((last - first) * 1000)) + 1}ms"
            sel = f'{metric}{{gpu="{gpu}"}}[{rng}]'
            inc = float(prom_query(pport, f"increase({sel})", last)[0]["value"][1])
            resets = float(prom_query(pport, f"resets({sel})", last)[0]["value"][1])
            want = expected(gpu, counter)
            results[(gpu, counter)] = (inc, want, resets)
    print(f"{'gpu':>3} {'counter':>10} {'increase()':>14} {'scripted':>14} {'ratio':>8} {'resets':>6}")
    for (gpu, counter), (inc, want, resets) in sorted(results.items()):
        ratio = inc / want if want else float("nan")
        print(f"{gpu:>3} {counter:>10} {inc:14.0f} {want:14.0f} {ratio:8.5f} {resets:6.0f}")
    check(len(results) == 8, f"expected 8 series (PCIe and NVLink rx/tx on 2 GPUs), got {sorted(results)}")
    for (gpu, counter), (inc, want, resets) in results.items():
        if want == 0:
            check(abs(inc) < 1e6, f"GPU {gpu} {counter}: increase {inc:.0f} where the script moved nothing")
        else:
            check(resets >= 1, f"GPU {gpu} {counter}: Prometheus saw no counter reset across the meter's restart")
            check(abs(inc / want - 1) <= 0.01, f"GPU {gpu} {counter}: increase() {inc:.0f} vs scripted {want:.0f}")
    below = {r["metric"]["gpu"]: float(r["value"][1]) for r in prom_query(pport, "tpscope_pcie_link_below_max", at)}
    check(below == {"0": 0.0, "1": 1.0}, f"tpscope_pcie_link_below_max: {below} (GPU 1 trains at Gen4 of Gen5)")
    for m in (a, b):
        lines = [l for l in m.stderr().splitlines() if "below its" in l]
        check(len(lines) == 1 and "GPU 1" in lines[0] and "Gen4 x16" in lines[0],
              f"one line per meter for GPU 1's link below max, got {lines}")
    print(f"prometheus: increase() matches the script within 1 % across a restart ({time.time() - t_start:.1f} s)")


# ---- format: promtool, families, labels ------------------------------------------------------------
FAMILIES = {
    "tpscope_pcie_rx_bytes_total": "counter", "tpscope_pcie_tx_bytes_total": "counter",
    "tpscope_nvlink_rx_bytes_total": "counter", "tpscope_nvlink_tx_bytes_total": "counter",
    "tpscope_meter_own_pcie_rx_bytes_total": "counter", "tpscope_meter_own_pcie_tx_bytes_total": "counter",
    "tpscope_meter_reads_total": "counter", "tpscope_meter_failed_reads_total": "counter",
    "tpscope_meter_wrap_gaps_total": "counter", "tpscope_meter_read_period_seconds": "gauge",
    "tpscope_meter_read_period_median_seconds": "gauge", "tpscope_pcie_link_generation": "gauge",
    "tpscope_pcie_link_generation_max": "gauge", "tpscope_pcie_link_width": "gauge",
    "tpscope_pcie_link_width_max": "gauge", "tpscope_pcie_link_below_max": "gauge",
    "tpscope_pcie_ceiling_bytes_per_second": "gauge", "tpscope_nvlink_ceiling_bytes_per_second": "gauge",
    "tpscope_nvlink_links": "gauge", "tpscope_gpu_info": "gauge", "tpscope_meter_calibrated": "gauge",
    "tpscope_meter_start_time_seconds": "gauge",
}


def run_format():
    promtool = tool("promtool")
    gpus = [{"name": 'Odd "name" \\ with\nnewline', "background_bytes_per_s": {"pcie_rx": 5e7}},
            {"name": "Fake H200", "nvlink": False, "pcie_link": {"gen_current": 3, "gen_max": 5}}]
    m = Meter("127.0.0.1:0", write_script(gpus))
    port = m.wait_serving()
    time.sleep(0.3)
    ctype, text = scrape(port)
    check(ctype == "text/plain; version=0.0.4; charset=utf-8", f"content type {ctype}")
    r = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
    check(r.returncode == 0, f"promtool check metrics: {r.stdout}{r.stderr}\n{text}")
    for name, kind in FAMILIES.items():
        check(f"# TYPE {name} {kind}\n" in text and f"# HELP {name} " in text, f"no HELP/TYPE {kind} for {name}")
    parsed = samples(text)
    rx = by_gpu(parsed, "tpscope_pcie_rx_bytes_total")
    check(set(rx) == {"0", "1"} and rx["0"] > 1e6, f"tpscope_pcie_rx_bytes_total per GPU: {rx}")
    check(set(by_gpu(parsed, "tpscope_nvlink_rx_bytes_total")) == {"0"}, "NVLink counters only where the GPU has them")
    for key in parsed:
        if key[0].startswith("tpscope_pcie_rx"):
            labels = dict(key[1])
            check(set(labels) == {"gpu", "uuid", "bus_id"} and labels["uuid"].startswith("GPU-"), f"labels {labels}")
    check('name="Odd \\"name\\" \\\\ with\\nnewline"' in text, "label values escaped (quote, backslash, newline)")
    check(by_gpu(parsed, "tpscope_pcie_link_generation") == {"0": 5.0, "1": 3.0}, "tpscope_pcie_link_generation")
    check(parsed[("tpscope_meter_calibrated", frozenset())] == 1.0, "the calibration ran: tpscope_meter_calibrated 1")
    _, again = scrape(port)
    rx2 = by_gpu(samples(again), "tpscope_pcie_rx_bytes_total")
    check(rx2["0"] > rx["0"], f"the counters move between scrapes ({rx['0']} -> {rx2['0']})")
    check(m.term() == 0, "SIGTERM: exit 0")
    m2 = Meter("127.0.0.1:0", write_script(gpus), ["--no-calibrate"])
    _, text = scrape(m2.wait_serving())
    check("tpscope_meter_calibrated 0" in text and "# TYPE tpscope_meter_own_" not in text,
          "without calibration: tpscope_meter_calibrated 0 and no own-bytes counters")
    check(m2.term() == 0, "SIGTERM: exit 0")
    # Serving while a wrapped command runs: the command scrapes, the summary follows, CMD's exit code is
    # returned, and CMD gets SIGPIPE at its default (the server ignores it for its own writes).
    port = free_port()
    child = (f"python3 -c \"import urllib.request; t = urllib.request.urlopen('http://127.0.0.1:{port}/metrics').read()"
             f"; open('{TMP}/wrapped.txt', 'wb').write(t)\"; grep SigIgn /proc/self/status > {TMP}/sigign.txt; exit 3")
    env = dict(os.environ, TPSCOPE_METER_FAKE="1", TPSCOPE_METER_FAKE_SCRIPT=write_script(gpus))
    r = subprocess.run([TPSCOPE, "meter", "--serve", f"127.0.0.1:{port}", "--format", "json", "--", "sh", "-c", child],
                       env=env, capture_output=True, text=True, timeout=60)
    check(r.returncode == 3, f"wrapped with --serve: CMD's exit code 3, got {r.returncode}: {r.stderr}")
    check(json.loads(r.stdout)["windows"][0]["name"] == "command", "wrapped with --serve: the JSON summary follows")
    with open(f"{TMP}/wrapped.txt") as f:
        check("tpscope_pcie_rx_bytes_total{" in f.read(), "the wrapped command scraped the counters")
    with open(f"{TMP}/sigign.txt") as f:
        ignored = int(f.read().split()[1], 16)
    check(not (ignored >> (signal.SIGPIPE - 1)) & 1, "the wrapped command starts with SIGPIPE at its default")
    # Not serving, nothing of the server is made: live mode still ends by SIGPIPE when its reader goes.
    r = subprocess.run(f"'{TPSCOPE}' meter -d 20 | head -1; exit ${{PIPESTATUS[0]}}", shell=True,
                       executable="/bin/bash", env=dict(os.environ, TPSCOPE_METER_FAKE="1"), capture_output=True,
                       timeout=20)
    check(r.returncode == 128 + signal.SIGPIPE, f"`tpscope meter | head -1`: killed by SIGPIPE, got {r.returncode}")
    print("format: promtool accepts the scrape; every family, label and escape as documented; serving while wrapping")


# ---- faults ------------------------------------------------------------------------------------------
def one_line_error(args, code, needle):
    env = dict(os.environ, TPSCOPE_METER_FAKE="1")
    try:
        r = subprocess.run([TPSCOPE, "meter", *args], env=env, capture_output=True, text=True, timeout=15)
    except subprocess.TimeoutExpired:
        raise Fail(f"tpscope meter {' '.join(args)}: still running after 15 s, want exit {code} ('{needle}')")
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    check(r.returncode == code and len(lines) == 1 and needle in lines[0],
          f"tpscope meter {' '.join(args)}: want exit {code} and one line with '{needle}', got {r.returncode}: {r.stderr}")


def raw(port, data, read=True, timeout=3):
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        if not read:
            return b""
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except (socket.timeout, ConnectionResetError):
            pass
        return out


def run_faults():
    script = write_script([{"background_bytes_per_s": {"pcie_rx": 1e8}}, {}])
    m = Meter("127.0.0.1:0", script)
    port = m.wait_serving()
    scrape(port)
    rss_before = m.status("VmRSS")
    one_line_error(["--serve", str(port)], 1, "in use")
    one_line_error(["--serve", "192.0.2.1:9400"], 1, "cannot serve on 192.0.2.1:9400")
    one_line_error(["--serve", "99999"], 2, "0-65535")
    one_line_error(["--serve", "::1:9400"], 2, "brackets")
    one_line_error(["--serve", "host:"], 2, "[ADDR:]PORT")
    # Malformed requests: an error status or a closed connection, never a crash.
    check(raw(port, b"\x00\xff garbage\r\n\r\n", timeout=1).startswith(b"HTTP/1.1 400"), "garbage: 400")
    check(raw(port, b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 20000 + b"\r\n\r\n", timeout=1).startswith(b"HTTP/1.1 400"),
          "a 20 KB header: 400")
    check(raw(port, b"GET /metrics HTTP/1.1\r\n" + b"X-a: b\r\n" * 200 + b"\r\n", timeout=1).startswith(b"HTTP/1.1 400"),
          "200 headers: 400")
    check(b" 404 " in raw(port, b"GET /nothing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"), "unknown path: 404")
    check(raw(port, b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n").split(b" ")[1]
          in (b"404", b"405", b"413"), "a POST with a 100 MB body is refused without reading it")
    # Slow scrapers: connections that send half a request and stall hold a worker only until the timeout.
    stalled = [socket.create_connection(("127.0.0.1", port)) for _ in range(12)]
    for s in stalled:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost:")
    # Many concurrent scrapers: all answered or refused, the meter keeps a bounded number of threads.
    results, peak = [], [0]

    def scraper():
        try:
            results.append(scrape(port, timeout=15)[1].count("tpscope_pcie_rx_bytes_total{"))
        except Exception as e:  # a refused or closed connection is allowed; a crash is not
            results.append(repr(e))

    workers = [threading.Thread(target=scraper) for _ in range(64)]
    for w in workers:
        w.start()
    while any(w.is_alive() for w in workers):
        peak[0] = max(peak[0], m.threads())
        time.sleep(0.02)
    for s in stalled:
        s.close()
    answered = sum(1 for r in results if r == 2)
    check(m.p.poll() is None, "the meter survived malformed, slow and concurrent scrapes")
    check(answered == 64, f"all 64 concurrent scrapes answered (queued behind the stalled ones), got {answered}: "
          f"{[r for r in results if r != 2][:3]}")
    check(peak[0] <= 24, f"threads stay bounded under 64 scrapers, peak {peak[0]}")
    rss_growth = m.status("VmRSS") - rss_before
    check(rss_growth < 32 * 1024, f"memory stays bounded: resident size grew {rss_growth} kB under the scrapes")
    check(scrape(port)[1].count("tpscope_pcie_rx_bytes_total{") == 2, "a normal scrape still works afterwards")
    # SIGTERM while scrapes are in flight: exit 0, promptly.
    stop = threading.Event()

    def hammer():
        while not stop.is_set():
            try:
                scrape(port, timeout=2)
            except Exception:
                pass

    hammers = [threading.Thread(target=hammer) for _ in range(8)]
    for h in hammers:
        h.start()
    time.sleep(0.5)
    t = time.time()
    code = m.term(timeout=10)
    stop.set()
    for h in hammers:
        h.join()
    check(code == 0, f"SIGTERM during scrapes: exit {code}, want 0; stderr: {m.stderr()}")
    check(time.time() - t < 5, "SIGTERM during scrapes: exits within 5 s")
    print(f"faults: clear lines, no crash, peak {peak[0]} threads and +{rss_growth} kB under 64 scrapers, "
          "exit 0 on SIGTERM")


def main():
    try:
        {"prometheus": run_prometheus, "format": run_format, "faults": run_faults}[MODE]()
        return 0
    except Fail as e:
        sys.stdout.flush()
        print(f"FAIL: {e}", file=sys.stderr)
        for name in sorted(os.listdir(TMP)):
            if name.endswith((".err", ".log")):
                with open(os.path.join(TMP, name)) as f:
                    print(f"--- {name}\n{f.read()[-3000:]}", file=sys.stderr)
        return 1
    finally:
        for p in KIDS:
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(TMP, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
