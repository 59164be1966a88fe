#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""HF transformers' Llama, tensor parallel with tp_plan="auto", its AllReduce through tpscope's c10d backend.

    torchrun --nproc-per-node 2 python/examples/hf_llama_tp.py [--compare] [--json OUT]
    python3 python/examples/hf_llama_tp.py --launch          # the same, started by itself (arms' command)

A random-weight Llama of the 8b preset's shape (hidden 4096, 32 heads, 8 KV heads, FFN 14336, vocab
128256) with --layers layers (2) is made once in --model-dir and loaded by every rank with
``from_pretrained(..., tp_plan="auto")``; torch.distributed is initialised with
"cpu:gloo,cuda:tpscope", so the row-parallel outputs' all-reduces and the LM head's gather run on
tpscope. Each rank takes GPU LOCAL_RANK % device_count; ranks sharing one GPU get
Config(shared_devices=True). HF binds the GPU from LOCAL_RANK itself, so with shared GPUs this script
sets LOCAL_RANK to the rank's actual ordinal before loading (HF's own code is not changed).

Prefill (one forward of --prompt-tokens random ids) and decode (--new-tokens greedy steps with the KV
cache) are timed, and marked on the meter's pipe when $TPSCOPE_METER_PIPE is set (rank 0 writes
`begin prefill` / `end prefill` / `begin decode` / `end decode`), so `tpscope arms` with
engine = "command" measures them. --compare: rank 0 then loads the same weights unsharded (TP=1) and
runs the same steps: the prefill logits must agree within the dtype's tolerance and the greedy tokens
must be equal, or part where TP=1's two best logits were closer than the logits' own difference (a
near-tie: random weights give flat logits, and the order of a sum may then pick either; --dtype
float32 makes such ties rare enough that 32 tokens agree). Exit status 0 when they do (or without
--compare).

--launch (for `tpscope arms`): reads TPSCOPE_DEVICES ("0,1") and TPSCOPE_SPLIT, shows the program those
GPUs alone (CUDA_VISIBLE_DEVICES); split "tensor" starts one rank per listed device with torchrun,
anything else runs one process (TP=1, no process group).
"""

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def parse():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-dir", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "tpscope-llama-8b-shape"))
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16",
                    help="the weights' and activations' type (the file holds bfloat16)")
    ap.add_argument("--compare", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--launch", action="store_true")
    return ap.parse_args()


def launch(args):
    listed = os.environ.get("TPSCOPE_DEVICES", "0").replace("[", "").replace("]", "")
    devices = [d for d in listed.split(",") if d.strip()]
    rest = [a for a in sys.argv[1:] if a != "--launch"]
    # The arm's GPUs are ordinals as tpscope sees them: through its own CUDA_VISIBLE_DEVICES, if set.
    seen = os.environ.get("CUDA_VISIBLE_DEVICES")
    unique = list(dict.fromkeys(d.strip() for d in devices))
    if seen:
        seen = seen.split(",")
        unique = [seen[int(d)] for d in unique]
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(unique)
    if os.environ.get("TPSCOPE_SPLIT", "none") == "tensor" and len(devices) > 1:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(len(devices)),
               os.path.abspath(__file__)] + rest
    else:
        cmd = [sys.executable, os.path.abspath(__file__)] + rest
    return subprocess.call(cmd)


class Marks:
    """The meter's control pipe: `begin NAME` / `end NAME` lines (src/meter/control.h)."""

    def __init__(self, enabled):
        path = os.environ.get("TPSCOPE_METER_PIPE") if enabled else None
        self.f = open(path, "w", buffering=1) if path else None

    def mark(self, what, name):
        if self.f:
            self.f.write("%s %s\n" % (what, name))


def make_model(path, layers):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8,
                         num_hidden_layers=layers, vocab_size=128256, max_position_embeddings=8192,
                         rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=False, dtype="bfloat16")
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = LlamaForCausalLM(config)
    torch.set_default_dtype(torch.float32)
    model.save_pretrained(path + ".tmp")
    os.rename(path + ".tmp", path)
    del model
    torch.cuda.empty_cache()


def local(t):
    """A plain tensor (a replicated DTensor's full value)."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def top2_gap(logits):
    v = logits[0, -1].float().topk(2).values
    return float(v[0] - v[1])


def run_steps(model, ids, new_tokens, marks, sync):
    """Prefill then greedy decode with the KV cache: the prefill logits, the tokens, each step's gap
    between its two largest logits, and the two times."""
    import torch
    with torch.no_grad():
        sync()
        marks.mark("begin", "prefill")
        t0 = time.perf_counter()
        out = model(ids, use_cache=True)
        sync()
        t1 = time.perf_counter()
        marks.mark("end", "prefill")
        logits = local(out.logits)[0].float()
        past = out.past_key_values
        tok = local(out.logits)[:, -1:].argmax(-1)
        tokens = [int(tok)]
        gaps = [top2_gap(local(out.logits))]
        marks.mark("begin", "decode")
        t2 = time.perf_counter()
        for _ in range(new_tokens - 1):
            out = model(tok, past_key_values=past, use_cache=True)
            past = out.past_key_values
            tok = local(out.logits)[:, -1:].argmax(-1)
            tokens.append(int(tok))
            gaps.append(top2_gap(local(out.logits)))
        sync()
        t3 = time.perf_counter()
        marks.mark("end", "decode")
    return logits, tokens, gaps, t1 - t0, t3 - t2


def main():
    args = parse()
    if args.launch:
        return launch(args)
    import torch
    from transformers import AutoModelForCausalLM

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = local % torch.cuda.device_count()
    torch.cuda.set_device(device)
    sync = torch.cuda.synchronize
    dtype = getattr(torch, args.dtype)
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 means float32 (PyTorch's default, said here)
    tp = world > 1
    if tp:
        import torch.distributed as dist
        try:
            import tpscope  # the installed package
        except ImportError:  # not installed: this checkout's python/ (TPSCOPE_LIBRARY names the library)
            sys.path.insert(0, os.path.join(HERE, ".."))
            import tpscope
        import tpscope.torch as tt
        if rank == 0:
            print("tpscope %s from %s, library %s" % (tpscope.__version__, os.path.dirname(tpscope.__file__),
                                                      tpscope.library()._name), file=sys.stderr)
        shared = torch.cuda.device_count() < world
        tt.set_config(tpscope.Config(shared_devices=shared))
        dist.init_process_group("cpu:gloo,cuda:tpscope")
        if shared:
            os.environ["LOCAL_RANK"] = str(device)  # HF binds cuda:LOCAL_RANK; here that is the shared GPU
    if rank == 0 and not os.path.isdir(args.model_dir):
        make_model(args.model_dir, args.layers)
    if tp:
        dist.barrier(device_ids=[device])
        model = AutoModelForCausalLM.from_pretrained(args.model_dir, tp_plan="auto", tp_size=world, dtype=dtype)
    else:
        model = AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=dtype).to("cuda")
    model.eval()
    ids = torch.randint(0, model.config.vocab_size, (1, args.prompt_tokens),
                        generator=torch.Generator().manual_seed(1)).to("cuda")
    run_steps(model, ids, 2, Marks(False), sync)  # warm-up: kernels and the backend's first calls
    logits, tokens, _, prefill_s, decode_s = run_steps(model, ids, args.new_tokens, Marks(rank == 0), sync)
    result = {"tp": world, "dtype": args.dtype, "shared_gpu": tp and torch.cuda.device_count() < world,
              "prompt_tokens": args.prompt_tokens,
              "new_tokens": args.new_tokens, "prefill_ms": round(prefill_s * 1e3, 2),
              "decode_ms_per_token": round(decode_s * 1e3 / max(1, args.new_tokens - 1), 3), "tokens": tokens}
    ok = True
    if args.compare and tp:
        del model
        torch.cuda.empty_cache()
        if rank == 0:
            ref = AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=dtype).to("cuda").eval()
            run_steps(ref, ids, 2, Marks(False), sync)
            ref_logits, ref_tokens, ref_gaps, ref_prefill, ref_decode = run_steps(ref, ids, args.new_tokens,
                                                                                  Marks(False), sync)
            diff = (logits - ref_logits).abs()
            scale = ref_logits.abs().max().item()
            # bf16 keeps 8 significant bits; two layers summed in another order move a logit by a few
            # units in its last place: the bound is 1/16 of the largest logit (float32: 1/1024).
            logits_ok = diff.max().item() <= scale / (16 if args.dtype == "bfloat16" else 1024)
            # Random weights give flat logits: where TP=1's two best tokens are closer than the logits'
            # own difference, the sum's order may pick either (a near-tie, not a fault of the reduction).
            diverge = next((i for i, (a, b) in enumerate(zip(tokens, ref_tokens)) if a != b), None)
            near_tie = diverge is not None and ref_gaps[diverge] <= 2 * diff.max().item()
            argmax_agree = (logits.argmax(-1) == ref_logits.argmax(-1)).float().mean().item()
            result.update({"tp1_prefill_ms": round(ref_prefill * 1e3, 2),
                           "tp1_decode_ms_per_token": round(ref_decode * 1e3 / max(1, args.new_tokens - 1), 3),
                           "logits_max_abs_diff": round(diff.max().item(), 5),
                           "logits_mean_abs_diff": round(diff.mean().item(), 6),
                           "logits_abs_max": round(scale, 4), "argmax_agreement": argmax_agree,
                           "logits_within_tolerance": logits_ok, "tp1_tokens": ref_tokens,
                           "tokens_equal": ref_tokens == tokens, "first_divergence": diverge,
                           "tp1_top2_gap_there": None if diverge is None else round(ref_gaps[diverge], 5),
                           "divergence_is_near_tie": near_tie})
            ok = logits_ok and (ref_tokens == tokens or near_tie)
        flag = torch.tensor([1.0 if ok else 0.0])
        dist.broadcast(flag, 0)  # CPU tensor: gloo
        ok = bool(flag.item())
    if rank == 0:
        print(json.dumps(result))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(result, f, indent=1)
    if tp:
        dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
