#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""benchmarks/wires/hf_llama_kl.py - HF transformers' Llama decoding with tensor parallelism through
tpscope.torch on one wire: each step's logits, for kl.py.

    torchrun --standalone --nproc-per-node 2 benchmarks/wires/hf_llama_kl.py --wire int8 --out DIR
    python3 benchmarks/wires/hf_llama_kl.py --prepare          # make the model and build the extension, once

The model is python/examples/hf_llama_tp.py's: a random-weight Llama of the 8b preset's shape (hidden 4096,
32 heads, 8 KV heads, FFN 14336, vocabulary 128256) with --layers layers, made once in --model-dir. Each
rank sets TPSCOPE_WIRE to --wire before the process group exists, and tpscope.torch's communicator has
Config(backend=HOST, shared_devices=...) with the wire left at EXACT (0), which lets the environment
decide: the host backend carries every wire (p2p, which auto may take for ranks sharing a GPU, has none).
Ranks sharing one GPU are the intended setup (a check of the arithmetic, not a timing).

For each --dtypes entry the model is loaded with tp_plan="auto" (TP = the world size), the --prompt-tokens
random ids (seed 1) prefilled, then --steps decode steps with the KV cache, step i's input token t_i:
t_0 the greedy token of the prompt's last position and t_{i+1} step i's greedy token, or, with
--tokens-from, the tokens the exact run wrote (DIR/hf-<dtype>-tokens.json), so every run sees the same
inputs. Two logits per step, float32, rank 0 writes both as [steps][vocabulary] .npy files:

  model   what LlamaForCausalLM returns: the LM head's column-parallel output gathered by tpscope.torch,
          whose all_gather runs on the exact wire whatever the group's, so the logits come through as the
          model computed them (DIR/hf-<dtype>-tp<N>-<wire>-model.npy)
  head32  the final hidden state (replicated after the last row-parallel all-reduce) through the full LM
          head weight in float32 on each rank: what the AllReduces alone change (...-head32.npy)

--tp1 (with --wire exact): rank 0 then loads the model unsharded and decodes the same tokens
(DIR/hf-<dtype>-tp1-<logits>.npy): TP=1 against TP=2 exact is the noise floor. Without torchrun the
script is TP=1 alone. DIR/hf-<wire>.json records the run. Exit 0, 1 on a failure, 2 for usage.
"""

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
WIRES = ("exact", "bf16", "int8", "fp8", "int4")


def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--wire", choices=WIRES, default="exact")
    ap.add_argument("--out", help="folder for the logits, tokens and the run's record")
    ap.add_argument("--tokens-from", help="folder holding hf-<dtype>-tokens.json of the exact run (forced tokens)")
    ap.add_argument("--tp1", action="store_true", help="also decode unsharded on rank 0 (the floor)")
    ap.add_argument("--dtypes", default="bfloat16,float32")
    ap.add_argument("--model-dir", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "tpscope-llama-8b-shape"))
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--steps", type=int, default=256)
    ap.add_argument("--prepare", action="store_true", help="make the model and build tpscope.torch's extension")
    args = ap.parse_args()
    args.dtypes = [d for d in args.dtypes.split(",") if d]
    for d in args.dtypes:
        if d not in ("bfloat16", "float32"):
            ap.error("--dtypes takes bfloat16 and float32, not %r" % d)
    if args.tp1 and args.wire != "exact":
        ap.error("--tp1 goes with --wire exact: the floor is TP=1 against TP=2 exact")
    if not args.prepare and not args.out:
        ap.error("--out is required (or --prepare)")
    return args


def import_tpscope():
    try:
        import tpscope  # the installed package
    except ImportError:  # this checkout's python/ (TPSCOPE_LIBRARY names the library)
        sys.path.insert(0, os.path.join(REPO, "python"))
        import tpscope
    return tpscope


def example():
    """python/examples/hf_llama_tp.py: the model's shape and maker, shared with the example."""
    sys.path.insert(0, os.path.join(REPO, "python", "examples"))
    import hf_llama_tp
    return hf_llama_tp


def lm_head_weight(model_dir):
    """The LM head's full weight from the model folder's safetensors (every rank reads it whole)."""
    from safetensors import safe_open
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            name = json.load(f)["weight_map"]["lm_head.weight"]
    else:
        name = "model.safetensors"
    with safe_open(os.path.join(model_dir, name), framework="pt", device="cpu") as f:
        return f.get_tensor("lm_head.weight")


def decode(model, ids, steps, forced, w32, local):
    """Prefill `ids`, then `steps` steps: (tokens, model logits, head32 logits) as a list and two arrays."""
    import numpy as np
    import torch
    import torch.nn.functional as F
    vocab = w32.shape[0]
    out_model = np.empty((steps, vocab), dtype=np.float32)
    out_head = np.empty((steps, vocab), dtype=np.float32)
    tokens = []
    with torch.no_grad():
        base = model.model(input_ids=ids, use_cache=True)
        past = base.past_key_values
        h = local(base.last_hidden_state)[:, -1:]
        tok = forced[0] if forced else int(local(model.lm_head(h))[0, -1].float().argmax())
        for i in range(steps):
            tokens.append(tok)
            base = model.model(input_ids=torch.tensor([[tok]], device=ids.device), past_key_values=past,
                               use_cache=True)
            past = base.past_key_values
            h = local(base.last_hidden_state)[:, -1:]
            logits = local(model.lm_head(h))[0, -1].float()
            out_model[i] = logits.cpu().numpy()
            out_head[i] = F.linear(h[0, -1].float(), w32).cpu().numpy()
            if i + 1 < steps:
                tok = forced[i + 1] if forced else int(logits.argmax())
    return tokens, out_model, out_head


def main():
    args = parse()
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM
    ex = example()

    if not torch.cuda.is_available():
        print("hf_llama_kl: no CUDA GPU is visible (the model runs on one)", file=sys.stderr)
        return 1
    if args.prepare:
        t0 = time.perf_counter()
        if not os.path.isdir(args.model_dir):
            ex.make_model(args.model_dir, args.layers)
        import_tpscope()
        import tpscope.torch as tt
        tt.extension()
        print("hf_llama_kl: model in %s and tpscope.torch's extension ready (%.0f s)"
              % (args.model_dir, time.perf_counter() - t0), file=sys.stderr)
        return 0
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = local_rank % torch.cuda.device_count()
    torch.cuda.set_device(device)
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 means float32
    tp = world > 1
    dist = None
    if tp:
        # Before the communicator exists: tpscope reads TPSCOPE_WIRE when the config's wire is EXACT (0).
        os.environ["TPSCOPE_WIRE"] = args.wire
        import torch.distributed as dist
        tpscope = import_tpscope()
        import tpscope.torch as tt
        shared = torch.cuda.device_count() < world
        tt.set_config(tpscope.Config(backend=tpscope.Backend.HOST, shared_devices=shared))
        dist.init_process_group("cpu:gloo,cuda:tpscope")
        # Where one rank works alone (making the model, the TP=1 run) the other waits on the host: a
        # tpscope barrier on the GPU gives up after the spin timeout, gloo's waits as long as the group's
        # timeout.
        alone = dist.new_group(backend="gloo")
        if shared:
            os.environ["LOCAL_RANK"] = str(device)  # HF binds cuda:LOCAL_RANK; here that is the shared GPU
    if rank == 0:
        os.makedirs(args.out, exist_ok=True)
        if not os.path.isdir(args.model_dir):
            ex.make_model(args.model_dir, args.layers)
    if tp:
        dist.barrier(group=alone)
    record = {"wire": args.wire if tp else "none", "tp": world, "backend": "host" if tp else "none",
              "shared_gpu": tp and torch.cuda.device_count() < world, "layers": args.layers,
              "prompt_tokens": args.prompt_tokens, "steps": args.steps, "forced": bool(args.tokens_from),
              "runs": []}
    w_bf16 = lm_head_weight(args.model_dir)
    for dtype_name in args.dtypes:
        dtype = getattr(torch, dtype_name)
        forced = None
        if args.tokens_from:
            with open(os.path.join(args.tokens_from, "hf-%s-tokens.json" % dtype_name)) as f:
                forced = json.load(f)["tokens"]
            if len(forced) < args.steps:
                print("hf_llama_kl: %d forced tokens for %d steps" % (len(forced), args.steps), file=sys.stderr)
                return 1
        w32 = w_bf16.to("cuda", torch.float32)
        ids = torch.randint(0, w32.shape[0], (1, args.prompt_tokens),
                            generator=torch.Generator().manual_seed(1)).to("cuda")
        variants = [("tp%d-%s" % (world, args.wire) if tp else "tp1", True)]
        if args.tp1 and tp:
            variants.append(("tp1", False))
        for name, sharded in variants:
            if not sharded and rank != 0:
                break
            t0 = time.perf_counter()
            if sharded and tp:
                model = AutoModelForCausalLM.from_pretrained(args.model_dir, tp_plan="auto", tp_size=world,
                                                             dtype=dtype)
            else:
                model = AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=dtype).to("cuda")
            model.eval()
            t1 = time.perf_counter()
            tokens, lm, l32 = decode(model, ids, args.steps, forced, w32, ex.local)
            torch.cuda.synchronize()
            t2 = time.perf_counter()
            if forced is None:
                forced = tokens  # the TP=1 run after it decodes the same tokens
                if rank == 0:
                    with open(os.path.join(args.out, "hf-%s-tokens.json" % dtype_name), "w") as f:
                        json.dump({"dtype": dtype_name, "prompt_tokens": args.prompt_tokens, "tokens": tokens}, f)
            if rank == 0:
                files = {}
                for kind, arr in (("model", lm), ("head32", l32)):
                    path = os.path.join(args.out, "hf-%s-%s-%s.npy" % (dtype_name, name, kind))
                    np.save(path, arr)
                    files[kind] = os.path.basename(path)
                record["runs"].append({"dtype": dtype_name, "run": name, "files": files,
                                       "load_s": round(t1 - t0, 2), "decode_s": round(t2 - t1, 2),
                                       "ms_per_step": round(1e3 * (t2 - t1) / args.steps, 2)})
                print("hf_llama_kl: %s %s: %d steps in %.1f s (load %.1f s)"
                      % (dtype_name, name, args.steps, t2 - t1, t1 - t0), file=sys.stderr)
            del model
            torch.cuda.empty_cache()
        if tp:
            dist.barrier(group=alone)  # rank 1 waits while rank 0 runs TP=1
    if rank == 0:
        with open(os.path.join(args.out, "hf-%s.json" % (args.wire if tp else "tp1")), "w") as f:
            json.dump(record, f, indent=1)
    if tp:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
