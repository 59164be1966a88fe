// SPDX-License-Identifier: Apache-2.0
// attention_cudnn.cc - cudnn-frontend's SDPA graph over the workload's qkv rows and KV cache.
#include "workload/attention_cudnn.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <mutex>
#include <tuple>

#include "common/checks.h"
#include "common/cuda_raii.h"
#include "common/log.h"

#ifdef TPSCOPE_WITH_CUDNN
#include <cudnn_frontend.h>
#include <dlfcn.h>

// The frontend reaches cuDNN through this handle (NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING).
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}
#endif

namespace tpscope::workload {

#ifdef TPSCOPE_WITH_CUDNN

namespace fe = cudnn_frontend;

namespace {

// dlopen once per process; the reason stays for every later caller.
bool loadCudnn(std::string* why) {
  static std::once_flag once;
  static std::string error;
  std::call_once(once, [] {
    const char* env = std::getenv("TPSCOPE_CUDNN_LIBRARY");
    const std::string lib = env && *env ? env : "libcudnn.so.9";
    void* h = dlopen(lib.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
      const char* e = dlerror();
      error = fmt::format("cuDNN did not load ({}: {}); set TPSCOPE_CUDNN_LIBRARY to libcudnn.so.9", lib,
                          e ? e : "not found");
      return;
    }
    fe::cudnn_dlhandle = h;
    if (fe::detail::get_backend_version() < 90000) error = "cuDNN 9 or newer is needed";
  });
  if (!error.empty() && why) *why = error;
  return error.empty();
}

}  // namespace

struct CudnnAttention::Impl {
  using Key = std::tuple<int, int, int, int, int, int>;  // tokens, keys, q_heads, kv_heads, head_dim, capacity
  int device = -1;
  cudnnHandle_t handle = nullptr;
  std::map<Key, std::shared_ptr<fe::graph::Graph>> graphs;
  DeviceBuffer workspace;
  size_t workspace_bytes = 0;

  tpsResult_t graphFor(const AttnShape& s, std::shared_ptr<fe::graph::Graph>* out) {
    const int keys = s.pos0 + s.tokens;
    const Key key{s.tokens, keys, s.q_heads, s.kv_heads, s.head_dim, s.capacity};
    if (auto it = graphs.find(key); it != graphs.end()) {
      *out = it->second;
      return tpsSuccess;
    }
    const int64_t d = s.head_dim, hq = s.q_heads, hk = s.kv_heads, sq = s.tokens, skv = keys, cap = s.capacity;
    const int64_t row = (hq + 2 * hk) * d;  // a qkv row: Q heads, then K, then V
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    // [batch, heads, sequence, head_dim] with the strides of the buffers as they are.
    auto q = g->tensor(fe::graph::Tensor_attributes()
                           .set_name("Q")
                           .set_uid(1)
                           .set_dim({1, hq, sq, d})
                           .set_stride({sq * row, d, row, 1}));
    auto k = g->tensor(fe::graph::Tensor_attributes()
                           .set_name("K")
                           .set_uid(2)
                           .set_dim({1, hk, skv, d})
                           .set_stride({hk * cap * d, cap * d, d, 1}));
    auto v = g->tensor(fe::graph::Tensor_attributes()
                           .set_name("V")
                           .set_uid(3)
                           .set_dim({1, hk, skv, d})
                           .set_stride({hk * cap * d, cap * d, d, 1}));
    auto opts = fe::graph::SDPA_attributes()
                    .set_name("prefill_attention")
                    .set_generate_stats(false)
                    .set_causal_mask_bottom_right(true)
                    .set_attn_scale(1.0f / std::sqrt(static_cast<float>(d)));
    auto [o, stats] = g->sdpa(q, k, v, opts);
    (void)stats;
    o->set_output(true).set_uid(4).set_dim({1, hq, sq, d}).set_stride({sq * hq * d, d, hq * d, 1});
    auto check = [&](fe::error_t e, const char* step) -> tpsResult_t {
      if (e.is_good()) return tpsSuccess;
      TPS_LOG_WARN("cuDNN attention ({} tokens over {} keys, {}/{} heads of {}): {} failed: {}", sq, skv, hq, hk, d,
                   step, e.get_message());
      return tpsUnavailable;
    };
    TPS_CHECK(check(g->validate(), "validate"));
    TPS_CHECK(check(g->build_operation_graph(handle), "build_operation_graph"));
    TPS_CHECK(check(g->create_execution_plans({fe::HeurMode_t::A}), "create_execution_plans"));
    TPS_CHECK(check(g->check_support(handle), "check_support"));
    TPS_CHECK(check(g->build_plans(handle), "build_plans"));
    int64_t ws = 0;
    TPS_CHECK(check(g->get_workspace_size(ws), "get_workspace_size"));
    if (static_cast<size_t>(ws) > workspace_bytes) {
      workspace.reset();
      TPS_CHECK(DeviceBuffer::create(device, static_cast<size_t>(ws), &workspace));
      workspace_bytes = static_cast<size_t>(ws);
    }
    graphs.emplace(key, g);
    *out = g;
    return tpsSuccess;
  }
};

bool CudnnAttention::available(std::string* why) { return loadCudnn(why); }

tpsResult_t CudnnAttention::create(int device, std::unique_ptr<CudnnAttention>* out, std::string* reason) {
  if (!loadCudnn(reason)) return tpsUnavailable;
  DeviceGuard on(device);
  auto impl = std::make_unique<Impl>();
  impl->device = device;
  if (fe::detail::create_handle(&impl->handle) != CUDNN_STATUS_SUCCESS) {
    *reason = "cudnnCreate failed";
    return tpsUnavailable;
  }
  out->reset(new CudnnAttention(std::move(impl)));
  return tpsSuccess;
}

CudnnAttention::~CudnnAttention() {
  if (impl_ && impl_->handle) {
    DeviceGuard on(impl_->device);
    impl_->graphs.clear();
    fe::detail::destroy_handle(impl_->handle);
  }
}

tpsResult_t CudnnAttention::run(const bf16_t* qkv, const bf16_t* k_cache, const bf16_t* v_cache, bf16_t* out,
                                const AttnShape& s, cudaStream_t stream) {
  DeviceGuard on(impl_->device);
  std::shared_ptr<fe::graph::Graph> g;
  TPS_CHECK(impl_->graphFor(s, &g));
  if (fe::detail::set_stream(impl_->handle, stream) != CUDNN_STATUS_SUCCESS) return tpsCudaError;
  std::unordered_map<int64_t, void*> ptrs = {
      {1, const_cast<bf16_t*>(qkv)}, {2, const_cast<bf16_t*>(k_cache)}, {3, const_cast<bf16_t*>(v_cache)}, {4, out}};
  fe::error_t e = g->execute(impl_->handle, ptrs, impl_->workspace.get());
  if (e.is_bad()) {
    TPS_LOG_WARN("cuDNN attention execute failed: {}", e.get_message());
    return tpsCudaError;
  }
  return tpsSuccess;
}

#else  // built without cuDNN's headers

struct CudnnAttention::Impl {};

bool CudnnAttention::available(std::string* why) {
  if (why) *why = "tpscope was built without cuDNN's headers (scripts/setup installs them into .deps/cudnn)";
  return false;
}

tpsResult_t CudnnAttention::create(int, std::unique_ptr<CudnnAttention>*, std::string* reason) {
  available(reason);
  return tpsUnavailable;
}

CudnnAttention::~CudnnAttention() = default;

tpsResult_t CudnnAttention::run(const bf16_t*, const bf16_t*, const bf16_t*, bf16_t*, const AttnShape&, cudaStream_t) {
  return tpsUnavailable;
}

#endif

CudnnAttention::CudnnAttention(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

bool CudnnAttention::applies(const AttnShape& s) {
  return s.head_dim % 8 == 0 && s.head_dim <= 256 && s.kv_heads > 0 && s.q_heads % s.kv_heads == 0 && s.tokens > 0;
}

}  // namespace tpscope::workload
