// tpscope's AllReduce behind ggml-cuda's communication interface (GGML_CUDA_ALLREDUCE=tpscope).
// Added by tpscope's integrations/llama.cpp patch; built only with -DGGML_CUDA_TPSCOPE=ON.
#pragma once

#include <cstddef>

struct ggml_tensor;
struct CUstream_st;  // cudaStream_t

struct ggml_cuda_tpscope;

// Logs once, from ggml_cuda_init, what GGML_CUDA_ALLREDUCE=tpscope does with this many CUDA devices
// (with one there is nothing to reduce and llama.cpp runs as it does on any single GPU). Silent when the
// variable names another choice.
void ggml_cuda_tpscope_log_devices(int device_count);

// A tpscope communicator over the CUDA devices (physical ordinals, one per backend), its backend from
// tpscope's own selection (TPSCOPE_ALLREDUCE=host|p2p|nccl|auto, else auto) and its wire from
// TPSCOPE_WIRE (exact|bf16|int8|fp8|int4|auto:BUDGET, else exact), both read by tpscope itself; the log
// line names the wire the communicator took. nullptr, with the reason in the log, when tpscope cannot
// take these devices (or refuses TPSCOPE_WIRE's value); the caller then uses llama.cpp's own choice.
ggml_cuda_tpscope * ggml_cuda_tpscope_init(const int * devices, size_t n_devices);
void                ggml_cuda_tpscope_free(ggml_cuda_tpscope * ctx);

// Sums tensors[0..n-1] in place, tensors[i] on devices[i], enqueued on streams[i] (capturable when the
// streams are being captured). false: tpscope does not take this call (its type, shape or layout; said
// once in the log) and nothing was enqueued, so the caller reduces it its own way. An error from
// tpscope, or a peer that never arrived in an earlier call, aborts through GGML_ABORT.
bool ggml_cuda_tpscope_allreduce(ggml_cuda_tpscope * ctx, ggml_tensor ** tensors, CUstream_st * const * streams);
