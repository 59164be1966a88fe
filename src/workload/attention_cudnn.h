// SPDX-License-Identifier: Apache-2.0
// attention_cudnn.h - prefill attention through cuDNN's fused flash attention (cudnn-frontend SDPA).
//
// What it computes is launchAttention's contract (kernels.h): causal grouped-query attention of a
// forward's `tokens` queries over cache positions 0..pos0 + t, the cache already holding this forward's
// K and V (launchRopeAndStore ran). cuDNN reads Q from the rotated qkv rows, K and V straight from the
// cache and writes out [tokens][q_heads head_dim]: strides only, no copies. The causal mask is aligned
// bottom-right, so the later micro-batches of a prefill attend to every earlier position.
//
// cuDNN is loaded at run time (dlopen of TPSCOPE_CUDNN_LIBRARY, else libcudnn.so.9): a binary without
// it still runs, on the built-in kernel, and says which attention ran. One execution graph per shape
// (tokens, keys), built on first use and cached; prefill's shapes repeat in every layer.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <string>

#include "tpscope/tpscope.h"
#include "workload/kernels.h"

namespace tpscope::workload {

class CudnnAttention {
 public:
  // Whether cuDNN can be used here: built with its headers and the library loads. *why says why not.
  static bool available(std::string* why);
  // Shapes it takes: head_dim a multiple of 8 up to 256, grouped query heads.
  static bool applies(const AttnShape& s);
  static tpsResult_t create(int device, std::unique_ptr<CudnnAttention>* out, std::string* reason);
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // out = attention(s) on `stream`. Builds the shape's graph the first time it is seen (not capturable
  // then; prefill runs eagerly).
  tpsResult_t run(const bf16_t* qkv, const bf16_t* k_cache, const bf16_t* v_cache, bf16_t* out, const AttnShape& s,
                  cudaStream_t stream);

 private:
  struct Impl;
  explicit CudnnAttention(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tpscope::workload
