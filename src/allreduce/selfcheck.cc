// SPDX-License-Identifier: Apache-2.0
// selfcheck.cc - one exact AllReduce per p2p algorithm, checked bit for bit (selfcheck.h).
#include "allreduce/selfcheck.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <chrono>
#include <cstdint>
#include <cstring>

#include "allreduce/p2p_algo.h"
#include "common/checks.h"
#include "common/cuda_raii.h"
#include "common/param.h"

TPS_PARAM_INT(TestP2pCheckFault, "TPSCOPE_TEST_P2P_CHECK_FAULT", -1)

namespace tpscope::detail {

namespace {

// One call per algorithm, sized by p2pAlgoFor's rule (float32 elements per GPU).
struct CheckCall {
  size_t count;
  P2pAlgo algo;
};
// The smallest sizes that reach each algorithm's code (two-shot just past the one-shot slot, with a
// remainder that does not split into whole vectors per rank): the check stays a few milliseconds.
constexpr CheckCall kCalls[] = {
    {4096, P2pAlgo::kLL},
    {(kP2pLLMax + 4096) / 4, P2pAlgo::kOneShot},
    {(kP2pOneShotMax + 65536) / 4 + 3, P2pAlgo::kTwoShot},
};
static_assert(p2pAlgoFor(kCalls[0].count * 4) == kCalls[0].algo && p2pAlgoFor(kCalls[1].count * 4) == kCalls[1].algo &&
              p2pAlgoFor(kCalls[2].count * 4) == kCalls[2].algo);
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
  const int local = static_cast<int>(devices.size());
  size_t total = 0;
  size_t offset[std::size(kCalls)];
  for (size_t c = 0; c < std::size(kCalls); ++c) {
    offset[c] = total;
    total += (kCalls[c].count * sizeof(float) + kOffsetAlign - 1) / kOffsetAlign * kOffsetAlign;
  }
  std::vector<DeviceBuffer> bufs(local);
  std::vector<Stream> streams(local);
  std::vector<float> host(total / sizeof(float));
  for (int r = 0; r < local; ++r) {
    const int q = first_rank + r;
    TPS_CHECK(DeviceBuffer::create(devices[r], total, &bufs[r]));
    TPS_CHECK(Stream::create(devices[r], &streams[r]));
    for (size_t c = 0; c < std::size(kCalls); ++c)
      for (size_t i = 0; i < kCalls[c].count; ++i) host[offset[c] / sizeof(float) + i] = checkValue(q, i);
    DeviceGuard g(devices[r]);
    TPS_CUDA_CHECK(cudaMemcpy(bufs[r].get(), host.data(), total, cudaMemcpyHostToDevice));
  }
  // Every local rank's part of a call is enqueued before the next call's (as the communicator does).
  std::vector<void*> ptrs(local);
  std::vector<cudaStream_t> raw(local);
  for (int r = 0; r < local; ++r) raw[r] = streams[r].get();
  for (size_t c = 0; c < std::size(kCalls); ++c) {
    for (int r = 0; r < local; ++r) ptrs[r] = bufs[r].as<char>() + offset[c];
    TPS_CHECK(p2p.allReduce(CallArgs{ptrs.data(), kCalls[c].count, tpsFloat32, raw.data()}));
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
  for (size_t c = 0; c < std::size(kCalls); ++c)
    for (size_t i = 0; i < kCalls[c].count; ++i) {
      float sum = 0.f;
      for (int p = 0; p < nranks; ++p) sum += checkValue(p, i);
      want[offset[c] / sizeof(float) + i] = sum;
    }
  const int64_t fault = tpsParamTestP2pCheckFault();
  tpsResult_t verdict = tpsSuccess;
  for (int r = 0; r < local && verdict == tpsSuccess; ++r) {
    const int q = first_rank + r;
    DeviceGuard g(devices[r]);
    if (fault == q) TPS_CUDA_CHECK(cudaMemset(bufs[r].as<char>() + offset[2] + 4 * 1001, 0x7f, 2));
    TPS_CUDA_CHECK(cudaMemcpy(host.data(), bufs[r].get(), total, cudaMemcpyDeviceToHost));
    for (size_t c = 0; c < std::size(kCalls) && verdict == tpsSuccess; ++c) {
      const float* got = host.data() + offset[c] / sizeof(float);
      const float* sum = want.data() + offset[c] / sizeof(float);
      if (std::memcmp(got, sum, kCalls[c].count * sizeof(float)) == 0) continue;
      size_t i = 0;
      while (std::memcmp(&got[i], &sum[i], sizeof(float)) == 0) ++i;
      if (why)
        *why = fmt::format(
            "p2p self-check: GPU {} (rank {}) holds {} at element {} of a {} AllReduce of {} B where the sum is {}: "
            "peer writes do not arrive intact on this box",
            devices[r], q, got[i], i, p2pAlgoName(kCalls[c].algo), kCalls[c].count * sizeof(float), sum[i]);
      verdict = tpsUnavailable;
    }
  }
  if (ms) *ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return verdict;
}

}  // namespace tpscope::detail
