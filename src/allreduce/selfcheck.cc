// SPDX-License-Identifier: Apache-2.0
// selfcheck.cc - one exact AllReduce per p2p algorithm, checked bit for bit (selfcheck.h).
#include "allreduce/selfcheck.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <chrono>
#include <cstdint>
#include <cstring>

#include "allreduce/registry.h"
#include "common/checks.h"
#include "common/cuda_raii.h"
#include "common/param.h"

TPS_PARAM_INT(TestP2pCheckFault, "TPSCOPE_TEST_P2P_CHECK_FAULT", -1)

namespace tpscope::detail {

namespace {

// One call per p2p algorithm, of its AlgorithmInfo::selfcheck_count float32 elements (the smallest sizes
// that reach each one's code, tails included: the check stays a few milliseconds).
struct CheckCall {
  int path;
  size_t count;
};
constexpr size_t kOffsetAlign = 256;  // each call's region starts aligned, as cudaMalloc'd buffers are

// Rank q's value at element i: an integer in [-512, 511], so sums over 8 ranks are exact in float32
// and the expected bits do not depend on the order of the sum.
float checkValue(int q, size_t i) {
  const uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ static_cast<uint32_t>(q + 1) * 0x9E3779B9u;
  return static_cast<float>(static_cast<int32_t>(h) >> 22);
}

}  // namespace

tpsResult_t selfCheckP2p(Backend& p2p, const std::vector<int>& devices, int first_rank, int nranks, std::string* why,
                         double* ms) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<CheckCall> calls;
  for (int path : p2p.paths())
    if (const size_t count = algorithmOf(path)->selfcheck_count; count > 0) calls.push_back({path, count});
  const int local = static_cast<int>(devices.size());
  size_t total = 0;
  std::vector<size_t> offset(calls.size());
  for (size_t c = 0; c < calls.size(); ++c) {
    offset[c] = total;
    total += (calls[c].count * sizeof(float) + kOffsetAlign - 1) / kOffsetAlign * kOffsetAlign;
  }
  std::vector<DeviceBuffer> bufs(local);
  std::vector<Stream> streams(local);
  std::vector<float> host(total / sizeof(float));
  for (int r = 0; r < local; ++r) {
    const int q = first_rank + r;
    TPS_CHECK(DeviceBuffer::create(devices[r], total, &bufs[r]));
    TPS_CHECK(Stream::create(devices[r], &streams[r]));
    for (size_t c = 0; c < calls.size(); ++c)
      for (size_t i = 0; i < calls[c].count; ++i) host[offset[c] / sizeof(float) + i] = checkValue(q, i);
    // On the call's stream: a cudaMemcpy from pageable memory returns once the bytes are staged, before
    // they land, and the call's stream (non-blocking) would not wait for them; a rank could then send
    // its peers zeros (seen with ranks in processes time-slicing one GPU). The staging makes `host` free
    // for the next rank as soon as this returns.
    DeviceGuard g(devices[r]);
    TPS_CUDA_CHECK(cudaMemcpyAsync(bufs[r].get(), host.data(), total, cudaMemcpyHostToDevice, streams[r].get()));
  }
  // Every local rank's part of a call is enqueued before the next call's (as the communicator does).
  std::vector<void*> ptrs(local);
  std::vector<cudaStream_t> raw(local);
  for (int r = 0; r < local; ++r) raw[r] = streams[r].get();
  for (size_t c = 0; c < calls.size(); ++c) {
    for (int r = 0; r < local; ++r) ptrs[r] = bufs[r].as<char>() + offset[c];
    TPS_CHECK(p2p.launchPath(calls[c].path, CallArgs{ptrs.data(), calls[c].count, tpsFloat32, raw.data()}));
  }
  for (int r = 0; r < local; ++r) {
    DeviceGuard g(devices[r]);
    TPS_CUDA_CHECK(cudaStreamSynchronize(raw[r]));
  }
  const tpsResult_t async = p2p.asyncError();
  if (async != tpsSuccess) {
    if (why) *why = fmt::format("p2p self-check: a peer did not take part ({})", tpsGetErrorString(async));
    return async;
  }
  std::vector<float> want(host.size());
  for (size_t c = 0; c < calls.size(); ++c)
    for (size_t i = 0; i < calls[c].count; ++i) {
      float sum = 0.f;
      for (int p = 0; p < nranks; ++p) sum += checkValue(p, i);
      want[offset[c] / sizeof(float) + i] = sum;
    }
  const int64_t fault = tpsParamTestP2pCheckFault();
  tpsResult_t verdict = tpsSuccess;
  for (int r = 0; r < local && verdict == tpsSuccess; ++r) {
    const int q = first_rank + r;
    DeviceGuard g(devices[r]);
    if (fault == q && !calls.empty())  // the last call's element 1001
      TPS_CUDA_CHECK(cudaMemset(bufs[r].as<char>() + offset.back() + 4 * 1001, 0x7f, 2));
    TPS_CUDA_CHECK(cudaMemcpy(host.data(), bufs[r].get(), total, cudaMemcpyDeviceToHost));
    for (size_t c = 0; c < calls.size() && verdict == tpsSuccess; ++c) {
      const float* got = host.data() + offset[c] / sizeof(float);
      const float* sum = want.data() + offset[c] / sizeof(float);
      if (std::memcmp(got, sum, calls[c].count * sizeof(float)) == 0) continue;
      size_t i = 0;
      while (std::memcmp(&got[i], &sum[i], sizeof(float)) == 0) ++i;
      if (why)
        *why = fmt::format(
            "p2p self-check: GPU {} (rank {}) holds {} at element {} of a {} AllReduce of {} B where the sum is {}: "
            "peer writes do not arrive intact on this box",
            devices[r], q, got[i], i, algorithmOf(calls[c].path)->label, calls[c].count * sizeof(float), sum[i]);
      verdict = tpsUnavailable;
    }
  }
  if (ms) *ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return verdict;
}

}  // namespace tpscope::detail
