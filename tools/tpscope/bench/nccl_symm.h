// SPDX-License-Identifier: Apache-2.0
// bench/nccl_symm.h - the `nccl-symm` column of `tpscope bench allreduce`: NCCL at its best, so the
// library's backends are judged against NCCL's fastest path and not only its default one.
//
// The column runs ncclAllReduce in place on buffers from ncclMemAlloc that are registered on NCCL
// communicators of their own (ncclCommInitAll over the same GPUs) as symmetric windows
// (ncclCommWindowRegister with NCCL_WIN_COLL_SYMMETRIC, NCCL >= 2.27): NCCL then may pick its
// symmetric-memory kernels, which read and write peers' buffers directly instead of staging through
// its FIFOs. It is not a library backend (tpsAllReduceWith refuses it, `auto` never picks it, --tune
// leaves it out); the bench times it with the same loops, check and meter as every other column.
//
// NVLink multicast stays off: the bench runs with NCCL_NVLS_ENABLE=0 (it refuses any other value), so
// registration never creates a multicast object, and this column refuses to set up without that value.
// Where the column cannot run (NCCL older than 2.27 at build or run time, one GPU given twice, a failed
// registration) it has no rows: the preamble and the JSON context say N/A and why.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tpscope/tpscope.h"

namespace tpscope::cli {

// The column's value among the bench's backends: tpsNumBackends, which no library backend has.
constexpr tpsBackend_t kBenchNcclSymm = tpsNumBackends;

// "nccl-symm" for the column, tpsBackendName for the library's backends.
const char* benchBackendName(tpsBackend_t backend);

// The first NCCL with symmetric windows (NCCL_VERSION_CODE 2.27.0).
constexpr int kNcclSymmMinVersion = 22700;

// Why the column cannot run: `built` is the NCCL_VERSION_CODE the binary was compiled against,
// `loaded` what ncclGetVersion reports at run time (0: unknown), `devices` the CUDA ordinals of the
// ranks, `nvls_enable` NCCL_NVLS_ENABLE as set (null: unset). Empty when it can.
std::string ncclSymmUnavailableReason(int built, int loaded, const std::vector<int>& devices, const char* nvls_enable);

// NCCL's own model time for one call (ncclGroupSimulateEnd: the tuner's estimate for the algorithm and
// protocol it picks), per size; nullopt where NCCL gave none.
struct NcclEstimate {
  tpsDataType_t dtype = tpsBfloat16;
  uint64_t bytes = 0;
  std::optional<double> us;
};

// What the column set up and what NCCL reported, for the preamble and the JSON context ("nccl_symm").
struct NcclSymmInfo {
  bool requested = false;  // --backend named nccl-symm
  bool available = false;
  std::string reason;         // why not, when requested and not available
  int built_version = 0;      // NCCL_VERSION_CODE at build time
  int loaded_version = 0;     // ncclGetVersion at run time; 0: not asked
  uint64_t window_bytes = 0;  // bytes per GPU from ncclMemAlloc, each registered as one window
  std::string nvls_enable;    // NCCL_NVLS_ENABLE as NCCL saw it
  std::vector<NcclEstimate> estimates;
};

// "# nccl-symm: ..." lines for the table's preamble (empty when the column was not requested).
std::string formatNcclSymmPreamble(const NcclSymmInfo& info);
// The context's "nccl_symm" object: null when the column was not requested.
nlohmann::json ncclSymmJson(const NcclSymmInfo& info);

// Communicators, buffers and windows of the column over `devices`, one rank per GPU in this process.
class NcclSymm {
 public:
  // Sets up everything (`max_bytes` per GPU, zero-filled), or returns null with info->reason set.
  // Fills info's versions, window size and NVLS setting either way.
  static std::unique_ptr<NcclSymm> create(const std::vector<int>& devices, size_t max_bytes, NcclSymmInfo* info);
  ~NcclSymm();
  NcclSymm(const NcclSymm&) = delete;
  NcclSymm& operator=(const NcclSymm&) = delete;

  // In-place sum of `count` elements on every GPU's buffer, one call per rank in one NCCL group,
  // asynchronous on `streams` (one per GPU, as the bench's). Capturable in a CUDA graph.
  tpsResult_t allReduce(tpsDataType_t dtype, size_t count, const std::vector<tpsStream_t>& streams);
  // NCCL's estimate for the same call (a simulated group: nothing is enqueued); nullopt when NCCL gives none.
  std::optional<double> estimateUs(tpsDataType_t dtype, size_t count, const std::vector<tpsStream_t>& streams);
  // tpsNcclError when a communicator reports an asynchronous error.
  tpsResult_t asyncError() const;
  const std::vector<void*>& buffers() const { return buffers_; }

 private:
  NcclSymm() = default;
  struct State;
  std::unique_ptr<State> s_;
  std::vector<void*> buffers_;
};

}  // namespace tpscope::cli
