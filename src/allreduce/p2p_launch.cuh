// SPDX-License-Identifier: Apache-2.0
// p2p_launch.cuh - the launches both p2p backends share (p2p.cu for one process, p2p_ipc.cu for a rank
// per process): kernel loading, the LL one-shot's geometry and the fused add + norm's choice of kernel,
// so that the two backends run the same kernels with the same grids for the same call.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "allreduce/p2p_algo.h"
#include "allreduce/p2p_kernels.cuh"

namespace tpscope::detail {

static_assert(kP2pLLThreadsMax <= kP2pThreads && kP2pLLThreads <= kFusedThreads);

// Loads every p2p kernel on the current device now: lazy loading waits for an idle device, which a
// peer's spinning kernel may never allow (host_staged.cu).
inline cudaError_t p2pLoadKernels() {
  cudaFuncAttributes fa;
  cudaError_t e = cudaSuccess;
  auto load = [&](auto kernel) {
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&fa, kernel);
  };
  load(p2pOneShot<float, true>);
  load(p2pOneShot<__half, true>);
  load(p2pOneShot<__nv_bfloat16, true>);
  load(p2pOneShot<float, false>);
  load(p2pOneShot<__half, false>);
  load(p2pOneShot<__nv_bfloat16, false>);
  load(p2pOneShotLL<float>);
  load(p2pOneShotLL<__half>);
  load(p2pOneShotLL<__nv_bfloat16>);
  load(p2pTwoShot<float>);
  load(p2pTwoShot<__half>);
  load(p2pTwoShot<__nv_bfloat16>);
  load(p2pOneShotLLAddNorm);
  load(p2pOneShotLLAddNormRow<false>);
  load(p2pOneShotLLAddNormRow<true>);
  return e;
}

// One rank's LL one-shot of `count` elements on the LL grid.
template <typename T>
cudaError_t p2pLaunchLL(bool pdl, const P2pLLHandle& h, T* buf, size_t count, cudaStream_t stream) {
  return launchKernel(pdl, p2pOneShotLL<T>, dim3(kP2pLLBlocks), dim3(p2pLLThreads(count * sizeof(T))), stream, h, buf,
                      count);
}

// One rank's fused add + norm (the call already fits: p2pFusedFits). With a norm, one block per row
// where a row fits one block (faster than the row spread over the LL grid: docs/PERFORMANCE.md,
// "Workload (tp)"); the add alone, or a wider row, takes the spread kernel (without a norm it is
// the LL kernel plus the add). A pushed call always takes the by-row kernel, on the whole LL grid so
// that every block's sequence number advances as in the other LL kernels.
template <bool kPushed>
cudaError_t p2pLaunchAddNorm(bool pdl, const P2pLLHandle& h, const __nv_bfloat16* partial,
                             const __nv_bfloat16* residual_in, __nv_bfloat16* residual_out, const __nv_bfloat16* weight,
                             __nv_bfloat16* normed, size_t rows, size_t width, float eps, cudaStream_t stream) {
  const bool by_row = kPushed || (weight != nullptr && width / 4 <= static_cast<size_t>(kRowThreads) * kRowWords);
  if (by_row)
    return launchKernel(pdl, p2pOneShotLLAddNormRow<kPushed>, dim3(kP2pLLBlocks), dim3(kRowThreads), stream, h, partial,
                        residual_in, residual_out, weight, normed, static_cast<int>(rows), static_cast<int>(width),
                        eps);
  return launchKernel(pdl, p2pOneShotLLAddNorm, dim3(kP2pLLBlocks), dim3(kP2pLLThreads), stream, h, partial,
                      residual_in, residual_out, weight, normed, static_cast<int>(rows), static_cast<int>(width), eps);
}

}  // namespace tpscope::detail
