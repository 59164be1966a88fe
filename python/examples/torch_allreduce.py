# SPDX-License-Identifier: Apache-2.0
"""Two processes reduce the same PyTorch tensors with tpscope and with torch.distributed.all_reduce, and
check that the results agree.

    torchrun --nproc-per-node 2 python/examples/torch_allreduce.py      # a rank per process, by torchrun
    python3 python/examples/torch_allreduce.py [--nranks 2]             # the same, spawning its ranks

With the wheel installed (pip install tpscope) nothing else is needed; from a source checkout without it,
TPSCOPE_LIBRARY=build/lib/libtpscope.so names the library. Each rank takes GPU `local rank %
device_count`: with fewer GPUs than ranks they share one (a test setup:
tpscope's Config then says shared_devices, which this script does, and torch.distributed uses
gloo, as NCCL refuses two ranks on one GPU). Rank 0 makes the tpscope id and torch.distributed carries
it to the others (broadcast_object_list). Exit status 0 when every dtype and size agrees.
"""

import argparse
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

try:
    import tpscope  # the installed package
except ImportError:  # not installed: this checkout's python/ (TPSCOPE_LIBRARY names the library)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import tpscope

SIZES = [8, 4096, 4097, 65536 + 3, (1 << 20) + 1, 8 << 20]


def spawned(rank, nranks, port, backend_name, result):
    result[rank] = run(rank, rank, nranks, "tcp://127.0.0.1:%d" % port, backend_name)


def run(rank, local_rank, nranks, init_method, backend_name):
    """One rank: 0 when tpscope and torch.distributed agree on every dtype and size, else 1."""
    device = local_rank % torch.cuda.device_count()
    torch.cuda.set_device(device)
    shared = torch.cuda.device_count() < nranks
    dist.init_process_group("gloo" if shared else "nccl", init_method=init_method, rank=rank, world_size=nranks)
    status = 0
    # The id is a secret (the ranks prove to rank 0 that they hold it): torch.distributed's channel
    # carries it here, which is as private as torch's own store on this box.
    ids = [tpscope.get_unique_id() if rank == 0 else None]
    dist.broadcast_object_list(ids, src=0)
    config = tpscope.Config(backend=tpscope.Backend[backend_name.upper()], shared_devices=shared)
    comm = tpscope.Communicator.init_rank(nranks, ids[0], rank, device, config)
    stream = torch.cuda.Stream()  # tpscope refuses the legacy default stream
    worst = 0.0
    bitwise = True
    with torch.cuda.stream(stream):
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            for n in SIZES:
                g = torch.Generator(device="cpu").manual_seed(1000 * rank + n)
                x = (torch.rand(n, generator=g) * 2 - 1).to(dtype).cuda()
                ref = x.clone()
                comm.all_reduce(x)  # this rank's tensor, dtype, count and current stream
                torch.cuda.current_stream().synchronize()
                dist.all_reduce(ref)  # torch.distributed's sum of the same tensors
                torch.cuda.synchronize()
                tol = {torch.float32: 1e-6, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]
                diff = (x.float() - ref.float()).abs().max().item()
                worst = max(worst, diff / nranks)
                bitwise = bitwise and torch.equal(x, ref)
                if diff > tol * nranks:
                    print("rank %d: %s n=%d differs from torch.distributed by %g" % (rank, dtype, n, diff))
                    status = 1
    comm.check()
    comm.close()
    if rank == 0:
        print("tpscope %s from %s, library %s" % (tpscope.__version__, os.path.dirname(tpscope.__file__),
                                                  tpscope.library()._name))
        print("tpscope (%s) and torch.distributed (%s) agree on %d ranks: largest difference %.3g per rank, "
              "bit-identical: %s" % (backend_name, "gloo" if shared else "nccl", nranks, worst, bitwise))
    dist.destroy_process_group()
    return status


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nranks", type=int, default=2)
    p.add_argument("--backend", default="p2p", choices=["auto", "host", "p2p", "nccl"])
    p.add_argument("--port", type=int, default=29533)
    args = p.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA GPU: nothing to compare", file=sys.stderr)
        return 1
    if "TORCHELASTIC_RUN_ID" in os.environ:  # started by torchrun: this process is one rank
        return run(int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"]),
                   "env://", args.backend)
    result = mp.get_context("spawn").Array("i", [-1] * args.nranks)
    mp.spawn(spawned, args=(args.nranks, args.port, args.backend, result), nprocs=args.nranks, join=True)
    return 0 if all(r == 0 for r in result) else 1


if __name__ == "__main__":
    sys.exit(main())
