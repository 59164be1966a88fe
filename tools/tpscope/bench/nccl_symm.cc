// SPDX-License-Identifier: Apache-2.0
// bench/nccl_symm.cc - the `nccl-symm` column: NCCL communicators, ncclMemAlloc buffers registered as
// symmetric windows, grouped in-place ncclAllReduce.
#include "bench/nccl_symm.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <set>

#include "allreduce/media.h"
#include "allreduce/nccl_types.h"
#include "common/cuda_raii.h"
#include "common/log.h"

// Symmetric windows came with NCCL 2.27; a build against older headers keeps the column, always N/A.
#if NCCL_VERSION_CODE >= 22700
#define TPS_NCCL_HAS_WINDOWS 1
#else
#define TPS_NCCL_HAS_WINDOWS 0
#endif

namespace tpscope::cli {

namespace {

std::string versionText(int code) { return code > 0 ? ncclVersionString(code) : std::string("unknown"); }

}  // namespace

const char* benchBackendName(tpsBackend_t backend) {
  return backend == kBenchNcclSymm ? "nccl-symm" : tpsBackendName(backend);
}

std::string ncclSymmUnavailableReason(int built, int loaded, const std::vector<int>& devices, const char* nvls_enable) {
  if (built < kNcclSymmMinVersion)
    return fmt::format("built against NCCL {}; symmetric windows need NCCL >= 2.27 headers", versionText(built));
  if (loaded != 0 && loaded < kNcclSymmMinVersion)
    return fmt::format("NCCL {} is loaded; symmetric windows need NCCL >= 2.27", versionText(loaded));
  if (devices.size() < 2) return "an AllReduce needs 2 GPUs";
  if (std::set<int>(devices.begin(), devices.end()).size() != devices.size())
    return "a GPU carries two ranks, and NCCL refuses two ranks on one GPU";
  if (nvls_enable == nullptr || std::strcmp(nvls_enable, "0") != 0)
    return "NCCL_NVLS_ENABLE is not 0: the column never registers windows with NVLink multicast enabled";
  return "";
}

std::string formatNcclSymmPreamble(const NcclSymmInfo& info) {
  if (!info.requested) return "";
  if (!info.available)
    return fmt::format("# nccl-symm: N/A ({}); NCCL built {}, loaded {}\n", info.reason,
                       versionText(info.built_version), versionText(info.loaded_version));
  return fmt::format(
      "# nccl-symm: ncclAllReduce in place on ncclMemAlloc buffers ({} B per GPU) registered with\n"
      "#            ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC) on communicators of its own; NCCL {}, "
      "NCCL_NVLS_ENABLE={}\n",
      info.window_bytes, versionText(info.loaded_version), info.nvls_enable);
}

nlohmann::json ncclSymmJson(const NcclSymmInfo& info) {
  using nlohmann::json;
  if (!info.requested) return nullptr;
  json estimates = json::array();
  for (const NcclEstimate& e : info.estimates)
    estimates.push_back({{"dtype", tpsDataTypeName(e.dtype)},
                         {"size_bytes", e.bytes},
                         {"estimated_us", e.us ? json(*e.us) : json(nullptr)}});
  return {{"available", info.available},
          {"reason", info.available ? json(nullptr) : json(info.reason)},
          {"nccl_built_version", info.built_version ? json(versionText(info.built_version)) : json(nullptr)},
          {"nccl_loaded_version", info.loaded_version ? json(versionText(info.loaded_version)) : json(nullptr)},
          {"allocator", "ncclMemAlloc"},
          {"window_flags", "NCCL_WIN_COLL_SYMMETRIC"},
          {"window_bytes", info.available ? json(info.window_bytes) : json(nullptr)},
          {"nvls_enable", info.nvls_enable.empty() ? json(nullptr) : json(info.nvls_enable)},
          {"nccl_estimates", estimates}};
}

struct NcclSymm::State {
  std::vector<int> devices;
  std::vector<ncclComm_t> comms;
#if TPS_NCCL_HAS_WINDOWS
  std::vector<ncclWindow_t> windows;
#endif
};

NcclSymm::~NcclSymm() {
  if (!s_) return;
  for (size_t r = 0; r < s_->devices.size(); ++r) {
    DeviceGuard guard(s_->devices[r]);
    (void)cudaDeviceSynchronize();
  }
#if TPS_NCCL_HAS_WINDOWS
  // Deregistration is collective, like registration: every rank in one group.
  if (!s_->windows.empty()) {
    (void)ncclGroupStart();
    for (size_t r = 0; r < s_->windows.size(); ++r)
      if (s_->windows[r]) (void)ncclCommWindowDeregister(s_->comms[r], s_->windows[r]);
    (void)ncclGroupEnd();
  }
#endif
  for (ncclComm_t c : s_->comms)
    if (c) (void)ncclCommDestroy(c);
  for (size_t r = 0; r < buffers_.size(); ++r)
    if (buffers_[r]) {
      DeviceGuard guard(s_->devices[r]);
      (void)ncclMemFree(buffers_[r]);
    }
}

std::unique_ptr<NcclSymm> NcclSymm::create(const std::vector<int>& devices, size_t max_bytes, NcclSymmInfo* info) {
  info->requested = true;
  info->built_version = NCCL_VERSION_CODE;
  int loaded = 0;
  if (ncclGetVersion(&loaded) == ncclSuccess) info->loaded_version = loaded;
  const char* nvls = std::getenv("NCCL_NVLS_ENABLE");
  info->nvls_enable = nvls ? nvls : "";
  info->reason = ncclSymmUnavailableReason(info->built_version, info->loaded_version, devices, nvls);
  if (!info->reason.empty()) return nullptr;
#if !TPS_NCCL_HAS_WINDOWS
  (void)max_bytes;
  return nullptr;
#else
  std::unique_ptr<NcclSymm> out(new NcclSymm());
  out->s_ = std::make_unique<State>();
  State& s = *out->s_;
  const int n = static_cast<int>(devices.size());
  s.devices = devices;
  s.comms.assign(devices.size(), nullptr);
  auto failed = [&](const std::string& what, ncclResult_t r) {
    info->reason = fmt::format("{}: {}", what, ncclGetErrorString(r));
    return nullptr;
  };
  if (ncclResult_t r = ncclCommInitAll(s.comms.data(), n, devices.data()); r != ncclSuccess) {
    s.comms.assign(devices.size(), nullptr);  // nothing to destroy that NCCL did not hand over
    return failed("ncclCommInitAll", r);
  }
  // Whole windows of the alignment NCCL requires, so every size of the sweep lies in the registered range.
  const size_t bytes = (std::max<size_t>(max_bytes, 1) + NCCL_WIN_REQUIRED_ALIGNMENT - 1) /
                       NCCL_WIN_REQUIRED_ALIGNMENT * NCCL_WIN_REQUIRED_ALIGNMENT;
  out->buffers_.assign(devices.size(), nullptr);
  for (int r = 0; r < n; ++r) {
    DeviceGuard guard(devices[r]);
    if (ncclResult_t e = ncclMemAlloc(&out->buffers_[r], bytes); e != ncclSuccess)
      return failed(fmt::format("ncclMemAlloc of {} bytes on GPU {}", bytes, devices[r]), e);
    // Timing runs on zeros, as for the other columns (bench/bench_runner.h says why). The memset runs on the
    // legacy stream, which the bench's non-blocking streams do not wait for: synchronise here.
    cudaError_t e = cudaMemset(out->buffers_[r], 0, bytes);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
      info->reason = fmt::format("cudaMemset on GPU {}: {}", devices[r], cudaGetErrorString(e));
      return nullptr;
    }
  }
  s.windows.assign(devices.size(), nullptr);
  ncclResult_t reg = ncclGroupStart();
  for (int r = 0; r < n && reg == ncclSuccess; ++r)
    reg = ncclCommWindowRegister(s.comms[r], out->buffers_[r], bytes, &s.windows[r], NCCL_WIN_COLL_SYMMETRIC);
  const ncclResult_t end = ncclGroupEnd();
  if (reg != ncclSuccess || end != ncclSuccess) {
    s.windows.assign(devices.size(), nullptr);  // not registered: nothing to deregister
    return failed("ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC)", reg != ncclSuccess ? reg : end);
  }
  for (int r = 0; r < n; ++r)
    if (s.windows[r] == nullptr) {
      info->reason = fmt::format("ncclCommWindowRegister gave no window on GPU {}", devices[r]);
      return nullptr;
    }
  info->window_bytes = bytes;
  info->available = true;
  return out;
#endif
}

tpsResult_t NcclSymm::allReduce(tpsDataType_t dtype, size_t count, const std::vector<tpsStream_t>& streams) {
  if (ncclGroupStart() != ncclSuccess) return tpsNcclError;
  for (size_t r = 0; r < s_->comms.size(); ++r) {
    const ncclResult_t res = ncclAllReduce(buffers_[r], buffers_[r], count, detail::ncclTypeOf(dtype), ncclSum,
                                           s_->comms[r], reinterpret_cast<cudaStream_t>(streams[r]));
    if (res != ncclSuccess) {
      (void)ncclGroupEnd();
      TPS_LOG_WARN("nccl-symm: ncclAllReduce on rank {}: {}", r, ncclGetErrorString(res));
      return tpsNcclError;
    }
  }
  const ncclResult_t end = ncclGroupEnd();
  if (end != ncclSuccess) TPS_LOG_WARN("nccl-symm: ncclGroupEnd: {}", ncclGetErrorString(end));
  return end == ncclSuccess ? tpsSuccess : tpsNcclError;
}

std::optional<double> NcclSymm::estimateUs(tpsDataType_t dtype, size_t count, const std::vector<tpsStream_t>& streams) {
  if (ncclGroupStart() != ncclSuccess) return std::nullopt;
  for (size_t r = 0; r < s_->comms.size(); ++r) {
    if (ncclAllReduce(buffers_[r], buffers_[r], count, detail::ncclTypeOf(dtype), ncclSum, s_->comms[r],
                      reinterpret_cast<cudaStream_t>(streams[r])) != ncclSuccess) {
      (void)ncclGroupEnd();
      return std::nullopt;
    }
  }
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  if (ncclGroupSimulateEnd(&sim) != ncclSuccess || sim.estimatedTime < 0) return std::nullopt;
  return static_cast<double>(sim.estimatedTime);
}

tpsResult_t NcclSymm::asyncError() const {
  for (ncclComm_t c : s_->comms) {
    ncclResult_t e = ncclSuccess;
    if (ncclCommGetAsyncError(c, &e) != ncclSuccess || e != ncclSuccess) return tpsNcclError;
  }
  return tpsSuccess;
}

}  // namespace tpscope::cli
