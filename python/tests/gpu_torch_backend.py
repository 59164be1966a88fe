# SPDX-License-Identifier: Apache-2.0
"""tpscope.torch on a GPU: two ranks (processes) on GPU `rank % device_count`, sharing one where there is
only one (Config(shared_devices=True) then).

    TPSCOPE_LIBRARY=build/lib/libtpscope.so python3 python/tests/gpu_torch_backend.py [--json OUT]

Checks, each printed as one line "PASS|FAIL name: detail":
  bits-DTYPE      dist.all_reduce through tpscope is bit-equal to gloo's on the same data (float32,
                  float16, bfloat16; odd sizes), on PyTorch's default stream and on a side stream
                  with async_op, and to the sum in float rounded once
  funcol          torch.distributed._functional_collectives.all_reduce / all_gather_tensor agree
  graph           a decode step (matmul, all-reduce, matmul, functional all-reduce) captured with
                  torch.cuda.graph replays with the same bits as the step run eagerly
  broadcast       dist.broadcast from each rank in turn, every dtype: every rank holds the root's bits
                  (default stream and async_op on a side stream)
  ops             every ReduceOp but SUM (MAX, MIN, PRODUCT, AVG, BAND, BOR, BXOR, PREMUL_SUM) is refused
                  with one line, by dist.all_reduce and by the functional all_reduce, and leaves the
                  tensor as it was
  dead-rank       rank 1 exits after init; rank 0's Work raises within the spin timeout
  refusals        bad dtype, non-contiguous and CPU-only (tpscope-only group) tensors get one line
  wrong-device    a tensor on another GPU than the rank's is refused naming both devices (the backend's
                  check on every box; through dist.all_reduce where the box has two GPUs)
  wire-gather     a group on Config(wire="int8") (host backend, which carries it): all_gather_into_tensor,
                  all_gather and the functional all_gather_tensor return every rank's bits, every dtype
  wire-broadcast  the same group: dist.broadcast from each root returns the root's bits, every dtype
  wire-all-reduce the same group: dist.all_reduce is within the int8 wire's error of the float sum, and
                  not that sum's bits (the wire is in use)
Exit status 0 when every check passes; 77 (skipped), with the reason, where torch or a GPU is missing.
CTest runs it under the label gpu (tests/CMakeLists.txt).
"""

import argparse
import json
import os
import socket
import sys
import time

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
except ImportError as e:  # reported by main(): the check needs torch
    torch = None
    TORCH_MISSING = str(e)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import package_under_test  # noqa: E402
package_under_test.use()
import tpscope  # noqa: E402

SIZES = [1, 3, 7, 1000, 4097, 65537, 262147, (1 << 20) + 3, (4 << 20) + 1]
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16} if torch else {}
INT_VIEW = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16} if torch else {}
SPIN_MS = 3000
SKIPPED = 77  # CTest's SKIP_RETURN_CODE for this test


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def data(rank, n, dtype):
    g = torch.Generator().manual_seed(7919 * rank + n)
    return (torch.randn(n, generator=g) * 4).to(dtype)


def bits(t):
    return t.detach().cpu().contiguous().view(INT_VIEW[t.dtype])


def setup(rank, nranks, port, backend="cpu:gloo,cuda:tpscope", config=None):
    import tpscope.torch as tt
    device = rank % torch.cuda.device_count()
    torch.cuda.set_device(device)
    tt.set_config(tpscope.Config(shared_devices=torch.cuda.device_count() < nranks, spin_timeout_ms=SPIN_MS,
                                 **(config or {})))
    dist.init_process_group(backend, init_method="tcp://127.0.0.1:%d" % port, rank=rank, world_size=nranks)
    return device


def check_bits(rank, nranks, out):
    side = torch.cuda.Stream()
    for name, dtype in DTYPES.items():
        bad = []
        gloo_ok = True
        for n in SIZES:
            x = data(rank, n, dtype)
            want = sum(data(r, n, dtype).float() for r in range(nranks)).to(dtype)  # float sum, rounded once
            ref = x.clone()
            try:
                dist.all_reduce(ref)  # CPU tensor: gloo
            except RuntimeError as e:
                gloo_ok = False
                ref = want
                out.setdefault("notes", []).append("gloo %s: %s" % (name, str(e).splitlines()[0]))
            y = x.cuda()
            dist.all_reduce(y)  # default stream: the backend's side stream
            with torch.cuda.stream(side):
                z = x.cuda()
                w = dist.all_reduce(z, async_op=True)
                w.wait()
                z2 = z * 1  # ordered after the reduction by wait()
            torch.cuda.current_stream().wait_stream(side)
            fut = dist.all_reduce(x.cuda(), async_op=True).get_future()
            fut_val = fut.wait()[0]
            for label, got in (("default-stream", y), ("side-stream", z2), ("future", fut_val)):
                if not torch.equal(bits(got), bits(ref)):
                    bad.append("%s n=%d vs gloo" % (label, n))
                if not torch.equal(bits(got), bits(want)):
                    bad.append("%s n=%d vs float-sum" % (label, n))
        out["bits-" + name] = (not bad, ("%d sizes, gloo %s" % (len(SIZES), "compared" if gloo_ok else
                                                               "refused: float-sum reference")) if not bad
                               else "; ".join(bad[:4]))


def check_funcol(rank, nranks, out):
    import torch.distributed._functional_collectives as funcol
    group = dist.group.WORLD
    bad = []
    for dtype in DTYPES.values():
        x = data(rank, 4099, dtype).cuda()
        eager = x.clone()
        dist.all_reduce(eager)
        f = funcol.all_reduce(x, "sum", group)
        f = funcol.wait_tensor(f) if hasattr(funcol, "wait_tensor") else f
        if not torch.equal(bits(f), bits(eager)):
            bad.append("all_reduce %s" % dtype)
        g = funcol.all_gather_tensor(x, 0, group)
        want = torch.cat([data(r, 4099, dtype) for r in range(nranks)])
        if not torch.equal(bits(g), bits(want)):
            bad.append("all_gather %s" % dtype)
    out["funcol"] = (not bad, "all_reduce and all_gather_tensor, 3 dtypes" if not bad else "; ".join(bad))


def check_graph(rank, nranks, out):
    import torch.distributed._functional_collectives as funcol
    torch.manual_seed(100 + rank)
    d, f = 4096, 3584  # a decode step of one rank's shard: up-projection, reduce, down-projection, reduce
    w1 = (torch.randn(d, f, device="cuda") * 0.02).bfloat16()
    w2 = (torch.randn(f, d, device="cuda") * 0.02).bfloat16()

    def step(x):
        h = x @ w1
        dist.all_reduce(h)
        y = torch.nn.functional.silu(h) @ w2
        return funcol.wait_tensor(funcol.all_reduce(y, "sum", dist.group.WORLD))

    inputs = [torch.randn(1, d, generator=torch.Generator().manual_seed(5 + i)).bfloat16().cuda() for i in range(4)]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        eager = [step(x).clone() for x in inputs]
        static_x = inputs[0].clone()
        for _ in range(2):
            step(static_x)  # warm-up before capture, as torch.cuda.graph asks
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = step(static_x)
    bad = []
    for i, x in enumerate(inputs):
        static_x.copy_(x)
        graph.replay()
        torch.cuda.synchronize()
        if not torch.equal(bits(static_y), bits(eager[i])):
            bad.append("replay %d" % i)
    out["graph"] = (not bad, "%d replays of a captured decode step equal eager" % len(inputs) if not bad
                    else "; ".join(bad))


def check_broadcast(rank, nranks, out):
    side = torch.cuda.Stream()
    bad = []
    for name, dtype in DTYPES.items():
        for root in range(nranks):
            for n in (1, 4097, (1 << 20) + 3):
                want = data(root, n, dtype)
                x = data(rank, n, dtype).cuda()
                dist.broadcast(x, src=root)
                if not torch.equal(bits(x), bits(want)):
                    bad.append("%s root %d n=%d" % (name, root, n))
                with torch.cuda.stream(side):
                    y = data(rank, n, dtype).cuda()
                    dist.broadcast(y, src=root, async_op=True).wait()
                    y2 = y * 1
                torch.cuda.current_stream().wait_stream(side)
                if not torch.equal(bits(y2), bits(want)):
                    bad.append("%s root %d n=%d side stream" % (name, root, n))
    out["broadcast"] = (not bad, "every root, 3 dtypes, 3 sizes, two streams" if not bad else "; ".join(bad[:4]))


def check_ops(rank, nranks, out):
    import torch.distributed._functional_collectives as funcol
    ops = [dist.ReduceOp.MAX, dist.ReduceOp.MIN, dist.ReduceOp.PRODUCT, dist.ReduceOp.AVG, dist.ReduceOp.BAND,
           dist.ReduceOp.BOR, dist.ReduceOp.BXOR]
    if hasattr(dist, "_make_nccl_premul_sum"):
        ops.append(dist._make_nccl_premul_sum(2.0))
    bad = []
    for op in ops:
        x = data(rank, 4097, torch.float32).cuda()
        before = x.clone()
        try:
            dist.all_reduce(x, op=op)
            bad.append("%s was not refused" % op)
        except Exception as e:
            line = str(e).splitlines()[0] if str(e) else repr(e)
            # The backend's own line, or torch's where it refuses the op before any backend sees it.
            if "tpscope: all_reduce supports ReduceOp.SUM only" not in line and "support" not in line.lower():
                bad.append("%s: %s" % (op, line))
        torch.cuda.synchronize()
        if not torch.equal(bits(x), bits(before)):
            bad.append("%s changed the tensor" % op)
    for name in ("max", "min", "product", "avg"):
        try:
            funcol.wait_tensor(funcol.all_reduce(data(rank, 8, torch.float32).cuda(), name, dist.group.WORLD))
            bad.append("functional %s was not refused" % name)
        except Exception as e:
            if "SUM only" not in str(e) and "support" not in str(e).lower():
                bad.append("functional %s: %s" % (name, (str(e).splitlines() or [repr(e)])[0]))
    # The communicator still works after the refusals.
    x = data(rank, 4097, torch.float32).cuda()
    dist.all_reduce(x)
    want = sum(data(r, 4097, torch.float32).float() for r in range(nranks))
    if not torch.equal(bits(x), bits(want)):
        bad.append("SUM after the refusals differs")
    out["ops"] = (not bad, "%d ops refused with one line each, the tensor untouched; SUM works after" % len(ops)
                  if not bad else "; ".join(bad[:4]))


def check_wrong_device(rank, nranks, out):
    import tpscope.torch as tt
    ext = tt.extension()
    mine = torch.cuda.current_device()
    details = []
    # The backend's own check, on every box: this rank's tensor, judged for another device index.
    try:
        ext.check_tensor(torch.zeros(4, device="cuda:%d" % mine), mine + 1, "all_reduce")
        details.append("a tensor on cuda:%d passed as cuda:%d's" % (mine, mine + 1))
    except Exception as e:
        want = "takes tensors on this rank's device cuda:%d; got one on cuda:%d" % (mine + 1, mine)
        if want not in str(e):
            details.append("check_tensor: %s" % str(e).splitlines()[0])
    ok = not details
    if torch.cuda.device_count() > 1:  # through the collective, where another GPU exists
        other = (mine + 1) % torch.cuda.device_count()
        try:
            dist.all_reduce(torch.zeros(8, device="cuda:%d" % other))
            details.append("dist.all_reduce took a tensor on cuda:%d" % other)
        except Exception as e:
            if "this rank's device cuda:%d" % mine not in str(e):
                details.append("dist.all_reduce: %s" % str(e).splitlines()[0])
        ok = not details
        scope = "check_tensor and dist.all_reduce"
    else:
        scope = "check_tensor (one GPU: no other device for dist.all_reduce)"
    out["wrong-device"] = (ok, scope if ok else "; ".join(details))


def check_refusals(rank, out):
    lines = {}
    for label, t in (("dtype", torch.zeros(8, dtype=torch.int32, device="cuda")),
                     ("non-contiguous", torch.zeros(8, 8, device="cuda").t()),
                     ("float64", torch.zeros(8, dtype=torch.float64, device="cuda"))):
        try:
            dist.all_reduce(t)
            lines[label] = None
        except Exception as e:
            lines[label] = str(e).splitlines()[0]
    ok = all(v and v.startswith("tpscope: all_reduce takes") for v in lines.values())
    out["refusals"] = (ok, json.dumps(lines))


WIRE_SIZES = [1, 63, 4097, 65537]


def int8_bound(parts, want, dtype):
    """The largest error the int8 wire may give each element of the sum of `parts` (float32 CPU tensors,
    one per rank): half a step of each rank's block scale (its 64-value block's largest magnitude / 126,
    wire_codec.h), summed over the ranks, plus an ulp of dtype for the rounding of both sums."""
    n = want.numel()
    pad = (-n) % 64
    bound = torch.zeros(n)
    for p in parts:
        scale = torch.nn.functional.pad(p.abs(), (0, pad)).view(-1, 64).amax(dim=1) / 126
        bound += scale.repeat_interleave(64)[:n] / 2
    ulp = {torch.float32: 2.0 ** -23, torch.float16: 2.0 ** -10, torch.bfloat16: 2.0 ** -7}[dtype]
    return bound * 1.001 + (want.abs() + bound) * ulp + 1e-30


def check_wire_collectives(rank, nranks, out):
    """The group is on the int8 wire: gathers and broadcasts still exact, all_reduce on the wire."""
    import torch.distributed._functional_collectives as funcol
    bad = []
    for name, dtype in DTYPES.items():
        for n in WIRE_SIZES:
            x = data(rank, n, dtype).cuda()
            want = torch.cat([data(r, n, dtype) for r in range(nranks)])
            got = torch.empty(n * nranks, dtype=dtype, device="cuda")
            dist.all_gather_into_tensor(got, x)
            parts = [torch.empty(n, dtype=dtype, device="cuda") for _ in range(nranks)]
            dist.all_gather(parts, x)
            f = funcol.wait_tensor(funcol.all_gather_tensor(x, 0, dist.group.WORLD))
            for label, g in (("all_gather_into_tensor", got), ("all_gather", torch.cat(parts)), ("funcol", f)):
                if not torch.equal(bits(g), bits(want)):
                    wrong = int((bits(g) != bits(want)).sum())
                    bad.append("%s %s n=%d: %d of %d values not the ranks' own" % (label, name, n, wrong, want.numel()))
    out["wire-gather"] = (not bad, "3 forms, 3 dtypes, %d sizes: every rank's bits" % len(WIRE_SIZES) if not bad
                          else "; ".join(bad[:4]))
    bad = []
    for name, dtype in DTYPES.items():
        for root in range(nranks):
            for n in WIRE_SIZES:
                want = data(root, n, dtype)
                x = data(rank, n, dtype).cuda()
                dist.broadcast(x, src=root)
                if not torch.equal(bits(x), bits(want)):
                    wrong = int((bits(x) != bits(want)).sum())
                    bad.append("%s root %d n=%d: %d of %d values not the root's" % (name, root, n, wrong, n))
    out["wire-broadcast"] = (not bad, "every root, 3 dtypes, %d sizes: the root's bits" % len(WIRE_SIZES) if not bad
                             else "; ".join(bad[:4]))
    bad, detail = [], []
    for name in ("float32", "bfloat16"):
        dtype, n = DTYPES[name], 65537
        x = data(rank, n, dtype).cuda()
        dist.all_reduce(x)
        got = x.cpu().float()
        parts = [data(r, n, dtype).float() for r in range(nranks)]
        exact = sum(parts).to(dtype)  # the exact wire's result: the float sum rounded once
        err = (got - exact.float()).abs()
        bound = int8_bound(parts, exact.float(), dtype)
        over = int((err > bound).sum())
        differ = int((bits(x) != bits(exact)).sum())
        if over:
            worst = float((err - bound).max())
            bad.append("%s: %d values beyond the int8 bound (worst %.3g over)" % (name, over, worst))
        if differ < n // 10:  # a bfloat16 sum rounds some of the wire's errors away, never most of them
            bad.append("%s: only %d of %d values differ from the exact sum: is the wire int8?" % (name, differ, n))
        detail.append("%s %d/%d values off the exact sum, max error %.3g" % (name, differ, n, float(err.max())))
    out["wire-all-reduce"] = (not bad, "; ".join(detail) if not bad else "; ".join(bad))


def wire_worker(rank, nranks, port, result):
    """A group whose communicator is on the int8 wire (the host backend carries it). The copy threshold is
    set, so that a call of WIRE_SIZES runs in one piece whatever a tune file on the box says: int8_bound's
    blocks are then the wire's."""
    out = {}
    try:
        setup(rank, nranks, port, config={"backend": tpscope.Backend.HOST, "wire": "int8",
                                          "host_copy_threshold": 1 << 20})
        check_wire_collectives(rank, nranks, out)
    except Exception as e:
        out["wire"] = (False, "raised: %s" % str(e).splitlines()[0])
    result[rank] = out
    try:
        dist.barrier(device_ids=[torch.cuda.current_device()])
        dist.destroy_process_group()
    except Exception as e:
        out["wire-teardown"] = (False, "raised: %s" % str(e).splitlines()[0])
        result[rank] = out


def worker(rank, nranks, port, result):
    out = {}
    try:
        setup(rank, nranks, port)
        for check in (check_bits, check_funcol, check_graph, check_broadcast, check_ops, check_wrong_device):
            try:
                check(rank, nranks, out)
            except Exception as e:
                out[check.__name__.replace("check_", "")] = (False, "raised: %s" % str(e).splitlines()[0])
            print("rank %d after %s: %s" % (rank, check.__name__, {k: v for k, v in out.items() if k != "notes"}),
                  flush=True)
        check_refusals(rank, out)
    except Exception as e:
        out["setup"] = (False, "raised: %s" % e)
    result[rank] = out  # before the teardown, which the next lines check on their own
    try:
        print("rank %d: barrier" % rank, flush=True)
        dist.barrier(device_ids=[torch.cuda.current_device()])
        print("rank %d: destroy_process_group" % rank, flush=True)
        dist.destroy_process_group()
        print("rank %d: torn down" % rank, flush=True)
        teardown = (True, "barrier and destroy_process_group returned")
    except Exception as e:
        teardown = (False, "raised: %s" % str(e).splitlines()[0])
    out["teardown"] = teardown
    result[rank] = out


def cpu_only_worker(rank, nranks, port, result):
    """A group whose only backend is tpscope: a CPU tensor has no backend, torch says so."""
    setup(rank, nranks, port, backend="tpscope")
    try:
        dist.all_reduce(torch.zeros(4))
        msg = None
    except Exception as e:
        msg = str(e).splitlines()[0]
    result[rank] = msg
    dist.destroy_process_group()


def dead_worker(rank, nranks, port, result):
    setup(rank, nranks, port)
    x = torch.ones(4096, device="cuda")
    dist.all_reduce(x)
    torch.cuda.synchronize()
    dist.barrier(device_ids=[torch.cuda.current_device()])
    dist.all_reduce(torch.ones(1))  # gloo: both ranks got here
    if rank == 1:
        os._exit(0)  # dies with the communicator open
    time.sleep(0.5)
    t0 = time.monotonic()
    err = later = None
    try:
        work = dist.all_reduce(x, async_op=True)
        work.get_future().wait()
    except Exception as e:
        err = str(e).splitlines()[0]
    elapsed = time.monotonic() - t0
    try:
        torch.cuda.synchronize()
        dist.all_reduce(x)
    except Exception as e:
        later = str(e).splitlines()[0]
    result[rank] = {"error": err, "elapsed_s": round(elapsed, 3), "next_call": later}
    sys.stdout.flush()
    os._exit(0)  # the peer is gone: no orderly teardown


def spawn(fn, nranks, timeout):
    port = free_port()
    mgr = mp.Manager()
    result = mgr.dict()
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=fn, args=(r, nranks, port, result)) for r in range(nranks)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout
    for p in procs:
        p.join(max(1, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()
    out = dict(result)
    out["exitcodes"] = [p.exitcode for p in procs]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nranks", type=int, default=2)
    ap.add_argument("--json")
    args = ap.parse_args()
    if torch is None:
        print("skipped: torch is not installed for this python (%s; scripts/setup installs it into .deps/torch)"
              % TORCH_MISSING)
        return SKIPPED
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        print("skipped: no CUDA GPU visible to torch (this check runs tpscope.torch on a GPU)")
        return SKIPPED
    import tpscope.torch as tt
    tt.extension()  # compile once, before the ranks start
    checks = {}
    t0 = time.monotonic()
    res = spawn(worker, args.nranks, 120)
    for rank in range(args.nranks):
        code = res["exitcodes"][rank]
        got = res.get(rank, {"ranks": (False, "rank %d gave no result (exit code %s)" % (rank, code))})
        if rank in res and "teardown" not in got:
            got["teardown"] = (False, "rank %d ended inside the teardown (exit code %s)" % (rank, code))
        for name, (ok, detail) in got.items():
            if name == "notes":
                continue
            prev = checks.get(name)
            checks[name] = (ok and (prev is None or prev[0]), detail if not ok or prev is None else prev[1])
    checks["collectives_s"] = (True, "%.1f" % (time.monotonic() - t0))
    wire = spawn(wire_worker, args.nranks, 120)
    for rank in range(args.nranks):
        code = wire["exitcodes"][rank]
        got = wire.get(rank, {"wire": (False, "rank %d gave no result (exit code %s)" % (rank, code))})
        for name, (ok, detail) in got.items():
            prev = checks.get(name)
            checks[name] = (ok and (prev is None or prev[0]), detail if not ok or prev is None else prev[1])
    cpu = spawn(cpu_only_worker, args.nranks, 25)
    msg = cpu.get(0)
    checks["cpu-tensor"] = (bool(msg) and "cpu" in msg.lower(), str(msg))
    dead = spawn(dead_worker, args.nranks, 30).get(0)
    ok = bool(dead) and dead["error"] is not None and dead["elapsed_s"] < SPIN_MS / 1000 + 2
    checks["dead-rank"] = (ok, json.dumps(dead) + " (spin timeout %d ms)" % SPIN_MS)
    failed = 0
    for name, (ok, detail) in checks.items():
        print("%s %s: %s" % ("PASS" if ok else "FAIL", name, detail))
        failed += not ok
    if args.json:
        with open(args.json, "w") as f:
            json.dump({k: {"ok": v[0], "detail": v[1]} for k, v in checks.items()}, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
