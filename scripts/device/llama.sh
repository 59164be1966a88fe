#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# scripts/device/llama.sh - llama-server as the arms' workload on a GPU machine, in one go.
#
# Run from the repository root with build/ built for the box (-DCMAKE_CUDA_ARCHITECTURES=90). The GPU
# machines reach no network, so the pinned llama.cpp source travels as LLAMA_SRC_TAR (the cache's src/
# folder, tarred by the caller: tar czf .llama-src/src.tar.gz -C ~/.cache/tpscope/llama.cpp-0c1e570 src).
# Writes logs and JSON into $OUT (default ./llama-out) and prints a summary last. Steps, each with a
# time limit so a hang costs one step:
#   1. build the CUDA llama-server (sm_90, NCCL) into the cache (about 5.5 min with 16 jobs; cached);
#   2. write the 8b-shape Q4_K GGUF (scripts/llama/make-gguf, seed 0);
#   3. arm A of examples/llama-four-arms.toml with real counters (ARMS, default A), copied to $OUT/run;
#   4. `tpscope tp --preset 8b` single-GPU decode at the same context, for the roofline comparison.
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${TPSCOPE_BUILD_DIR:-build}
OUT=${OUT:-llama-out}
ARMS=${ARMS:-A}
export TPSCOPE_CACHE_DIR=${TPSCOPE_CACHE_DIR:-/root/.cache/tpscope}
LLAMA_SRC_TAR=${LLAMA_SRC_TAR:-.llama-src/src.tar.gz}
MODEL=${MODEL:-models/tpscope-8b-q4_k.gguf}
BIN="$BUILD/bin/tpscope"
mkdir -p "$OUT" models
[ -x "$BIN" ] || { echo "llama.sh: $BIN not found: build $BUILD first" >&2; exit 2; }
source scripts/device/lib.sh

nvidia-smi -L >"$OUT/gpus.txt" 2>&1
ROOT=$TPSCOPE_CACHE_DIR/llama.cpp-0c1e570
if [ ! -f "$ROOT/src/.tpscope-extracted" ] && [ -f "$LLAMA_SRC_TAR" ]; then
  mkdir -p "$ROOT" && tar xzf "$LLAMA_SRC_TAR" -C "$ROOT"
fi
run build-llama-server 420 scripts/llama/build-llama-server --flavour cuda --cuda-arch 90 --jobs "$(nproc)"
SERVER=$(scripts/llama/build-llama-server --flavour cuda --cuda-arch 90 --print-path 2>/dev/null)
cp -f "$(dirname "$SERVER")/../BUILD_INFO" "$OUT/llama-BUILD_INFO.txt" 2>/dev/null
[ -f "$MODEL" ] || run make-gguf 240 scripts/llama/make-gguf --preset 8b --type q4_k --seed 0 -o "$MODEL"
if [ -x "$SERVER" ] && [ -f "$MODEL" ]; then
  TPSCOPE_LLAMA_SERVER=$SERVER run arms 300 "$BIN" arms examples/llama-four-arms.toml --arms "$ARMS" --out "$OUT/run"
  cp "$OUT/arms.log" "$OUT/run/arms-stderr.log" 2>/dev/null
fi
run tp-8b-none 120 "$BIN" tp --preset 8b --phase decode --ctx 4096 --tokens 256 --split none --devices 0 --format json
python3 - "$OUT" <<'PY'
import json, sys, re
out = sys.argv[1]
def tail_json(path):
    text = open(path).read()
    return json.loads(text[text.index("{"):text.rindex("}") + 1])
try:
    tp = [r for r in tail_json(f"{out}/tp-8b-none.log")["results"] if r["phase"] == "decode"][0]
except Exception as e:
    tp = None; print("tp: no JSON", e)
try:
    man = json.load(open(f"{out}/run/manifest.json"))
    eff = {s["key"]: s["value"] for s in man["effective"][0]["settings"]}
    rows = [json.loads(l) for l in open(f"{out}/run/results.jsonl") if l.strip()]
    dec = [p for r in rows if r["valid"] for p in r["phases"] if p["phase"] == "decode"]
    pre = [p for r in rows if r["valid"] for p in r["phases"] if p["phase"] == "prefill"]
    med = lambda v: sorted(v)[len(v) // 2] if v else float("nan")
    d_tok = med([p["engine_tok_s"] for p in dec]); p_tok = med([p["engine_tok_s"] for p in pre])
    model_bytes = float(eff.get("server_model_bytes", "nan"))
    print(f"llama-server arm A: decode {d_tok:.1f} tok/s (client {med([p['tok_s'] for p in dec]):.1f}), "
          f"prefill {p_tok:.1f} tok/s; model {model_bytes/1e9:.3f} GB; build {eff.get('server_build_info')}")
    for p in dec:
        g = p["gpus"][0]
        print(f"  decode rep: rx {g['pcie_rx_mbps']} tx {g['pcie_tx_mbps']} MB/s, samples {g['samples']}")
    if tp:
        bw = tp["copy_gbps"] * 1e9
        print(f"tpscope tp 8b none: {tp['tokens_per_s']:.1f} tok/s, {tp['share_of_roofline']*100:.1f} % of its roofline "
              f"(copy rate {tp['copy_gbps']:.0f} GB/s)")
        roof = bw / model_bytes
        print(f"llama-server roofline (model bytes per token / same copy rate): {roof:.1f} tok/s; "
              f"decode = {d_tok/roof*100:.1f} % of it")
except Exception as e:
    print("summary failed:", repr(e))
PY
echo "failed steps: ${failed[*]:-none}"
