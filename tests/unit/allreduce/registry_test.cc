// SPDX-License-Identifier: Apache-2.0
// registry_test - unit tests for src/allreduce/registry.cc: the algorithms, their path numbers and names,
// what each takes, and the choice among them.
#include "allreduce/registry.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "allreduce/p2p_algo.h"
#include "allreduce/wire.h"
#include "tpscope/tpscope.h"

namespace tpscope::detail {
namespace {

HostTuning tuned(size_t copy_threshold) {
  HostTuning t{};
  t.copy_threshold = copy_threshold;
  return t;
}

// The name of the path chooseAlgorithm picks among `backend`'s algorithms, or "none".
std::string pick(tpsBackend_t backend, size_t bytes, int nranks = 2, Shape shape = kOneProcess,
                 tpsDataType_t dtype = tpsBfloat16, size_t threshold = 4u << 20) {
  const int p = chooseAlgorithm(pathsOf(backend, nranks, shape), bytes, dtype, nranks, shape, tuned(threshold));
  return p < 0 ? "none" : algorithmOf(p)->name;
}

TEST(AlgorithmRegistry, FirstPathsAreTheEnumsAndNamesAreUnique) {
  const auto& all = algorithms();
  ASSERT_GE(all.size(), static_cast<size_t>(tpsNumPaths));
  EXPECT_EQ(tpsGetPathCount(), static_cast<int>(all.size()));
  // tpsPath_t's numbers never change: the registry's first entries are those paths, in that order.
  const char* enum_names[tpsNumPaths] = {"host-kernel", "host-copy", "p2p-oneshot", "p2p-twoshot", "nccl", "p2p-ll"};
  for (int p = 0; p < tpsNumPaths; ++p) {
    EXPECT_STREQ(all[p]->name, enum_names[p]) << "path " << p;
    EXPECT_STREQ(tpsPathName(static_cast<tpsPath_t>(p)), enum_names[p]);
  }
  std::set<std::string> names;
  for (const AlgorithmInfo* a : all) {
    EXPECT_TRUE(names.insert(a->name).second) << a->name << " is registered twice";
    EXPECT_NE(a->create, nullptr) << a->name;
    EXPECT_NE(a->traffic, nullptr) << a->name;
    EXPECT_NE(a->backend, tpsBackendAuto) << a->name;
  }
  EXPECT_EQ(tpsGetPathByName("host-copy"), static_cast<int>(tpsPathHostCopyEngine));
  EXPECT_EQ(tpsGetPathByName("p2p-ll"), static_cast<int>(tpsPathP2pLL));
  EXPECT_EQ(tpsGetPathByName("no-such-path"), -1);
  EXPECT_EQ(tpsGetPathByName(nullptr), -1);
  EXPECT_EQ(tpsGetPathName(tpsGetPathCount()), nullptr);
  EXPECT_EQ(tpsGetPathName(-1), nullptr);
  EXPECT_STREQ(tpsPathName(static_cast<tpsPath_t>(tpsGetPathCount())), "unknown");
}

TEST(AlgorithmRegistry, P2pBySize) {
  EXPECT_EQ(pick(tpsBackendP2p, 8 << 10), "p2p-ll");
  EXPECT_EQ(pick(tpsBackendP2p, kP2pLLMax), "p2p-ll");
  EXPECT_EQ(pick(tpsBackendP2p, kP2pLLMax + 8), "p2p-oneshot");
  EXPECT_EQ(pick(tpsBackendP2p, 12), "p2p-oneshot") << "not whole 8-byte words";
  EXPECT_EQ(pick(tpsBackendP2p, 2), "p2p-oneshot");
  EXPECT_EQ(pick(tpsBackendP2p, kP2pOneShotMax), "p2p-oneshot");
  EXPECT_EQ(pick(tpsBackendP2p, kP2pOneShotMax + 16), "p2p-twoshot");
  EXPECT_EQ(pick(tpsBackendP2p, size_t{1} << 30), "p2p-twoshot");
  // The same choice in both process shapes and for 3 ranks.
  for (Shape shape : {kOneProcess, kRankPerProcess})
    for (int n : {2, 3, 8}) {
      EXPECT_EQ(pick(tpsBackendP2p, 4096, n, shape), "p2p-ll");
      EXPECT_EQ(pick(tpsBackendP2p, 512 << 10, n, shape), "p2p-oneshot");
      EXPECT_EQ(pick(tpsBackendP2p, 64 << 20, n, shape), "p2p-twoshot");
    }
}

TEST(AlgorithmRegistry, HostByThresholdAndShape) {
  EXPECT_EQ(pick(tpsBackendHost, 8 << 10), "host-kernel");
  EXPECT_EQ(pick(tpsBackendHost, (4u << 20) - 2), "host-kernel");
  EXPECT_EQ(pick(tpsBackendHost, 4u << 20), "host-copy");
  EXPECT_EQ(pick(tpsBackendHost, size_t{1} << 30, 3), "host-copy");
  EXPECT_EQ(pick(tpsBackendHost, 64 << 10, 2, kOneProcess, tpsFloat32, 32 << 10), "host-copy") << "tuned threshold";
  // The copy engines' events and streams are one process's: across processes the kernel takes every size.
  EXPECT_EQ(pick(tpsBackendHost, size_t{1} << 30, 2, kRankPerProcess), "host-kernel");
  for (int p : pathsOf(tpsBackendHost, 2, kRankPerProcess))
    EXPECT_EQ(std::string(algorithmOf(p)->name).find("host-copy"), std::string::npos) << algorithmOf(p)->name;
  // Without the copy path (no stream memory operations), the kernel takes every size.
  const std::vector<int> kernel_only = {tpsPathHostKernel};
  EXPECT_EQ(chooseAlgorithm(kernel_only, size_t{1} << 30, tpsFloat32, 2, kOneProcess, tuned(4u << 20)),
            static_cast<int>(tpsPathHostKernel));
}

TEST(AlgorithmRegistry, NothingTakesWhatNoAlgorithmServes) {
  EXPECT_EQ(pick(tpsBackendNccl, 8 << 10), "nccl");
  EXPECT_EQ(pick(tpsBackendP2p, 8 << 10, 1), "none") << "one rank";
  EXPECT_EQ(pick(tpsBackendP2p, 8 << 10, TPS_MAX_DEVICES + 1), "none");
  EXPECT_EQ(pick(tpsBackendP2p, 0), "none");
  EXPECT_EQ(pick(tpsBackendHost, 64, 2, kOneProcess, static_cast<tpsDataType_t>(7)), "none");
  EXPECT_EQ(chooseAlgorithm({}, 4096, tpsFloat32, 2, kOneProcess, tuned(4u << 20)), -1);
  EXPECT_EQ(chooseAlgorithm({99}, 4096, tpsFloat32, 2, kOneProcess, tuned(4u << 20)), -1) << "not a path";
}

TEST(AlgorithmRegistry, WiresAreAskedForAndNeverForcedOnACall) {
  auto pickWire = [](size_t bytes, tpsDataType_t dtype, WireCode w, Shape shape = kOneProcess) {
    const int p = chooseAlgorithm(pathsOf(tpsBackendHost, 2, shape), bytes, dtype, 2, shape, tuned(4u << 20), w);
    return p < 0 ? std::string("none") : std::string(algorithmOf(p)->name);
  };
  EXPECT_EQ(pickWire(64 << 20, tpsBfloat16, WireCode::kExact), "host-copy");
  EXPECT_EQ(pickWire(64 << 20, tpsBfloat16, WireCode::kInt8), "host-copy+int8");
  EXPECT_EQ(pickWire(64 << 10, tpsBfloat16, WireCode::kFp8), "host-kernel+fp8");
  EXPECT_EQ(pickWire(64 << 20, tpsFloat32, WireCode::kBf16), "host-copy+bf16");
  // bf16 on a 16-bit dtype is no wire: the call runs exact, and its path says so.
  EXPECT_EQ(pickWire(64 << 20, tpsFloat16, WireCode::kBf16), "host-copy");
  EXPECT_EQ(pickWire(64 << 20, tpsBfloat16, WireCode::kInt4, kRankPerProcess), "host-kernel+int4");
  // The p2p backend's wires are two-shot's, from its sizes up; below them, and bf16 on a 16-bit dtype,
  // the call runs exact.
  auto pickP2p = [](size_t bytes, tpsDataType_t dtype, WireCode w) {
    const int p =
        chooseAlgorithm(pathsOf(tpsBackendP2p, 2, kOneProcess), bytes, dtype, 2, kOneProcess, tuned(4u << 20), w);
    return p < 0 ? std::string("none") : std::string(algorithmOf(p)->name);
  };
  EXPECT_EQ(pickP2p(64 << 20, tpsBfloat16, WireCode::kInt8), "p2p-twoshot+int8");
  EXPECT_EQ(pickP2p(kP2pOneShotMax + 2, tpsFloat16, WireCode::kInt4), "p2p-twoshot+int4");
  EXPECT_EQ(pickP2p(kP2pOneShotMax, tpsFloat16, WireCode::kInt4), "p2p-oneshot");
  EXPECT_EQ(pickP2p(8 << 10, tpsBfloat16, WireCode::kFp8), "p2p-ll");
  EXPECT_EQ(pickP2p(64 << 20, tpsFloat32, WireCode::kBf16), "p2p-twoshot+bf16");
  EXPECT_EQ(pickP2p(64 << 20, tpsBfloat16, WireCode::kBf16), "p2p-twoshot");
  // Every compressed algorithm names its wire and is lossy only by it.
  for (const AlgorithmInfo* a : algorithms()) {
    const std::string name = a->name;
    const size_t plus = name.find('+');
    if (a->wire == WireCode::kExact)
      EXPECT_EQ(plus, std::string::npos) << name;
    else
      EXPECT_EQ(name.substr(plus + 1), wireName(a->wire)) << name;
  }
}

TEST(AlgorithmRegistry, TrafficPerGpu) {
  auto traffic = [](const char* name, size_t bytes, int n) {
    return algorithmOf(pathByName(name))->traffic(bytes, bytes / 2, n);
  };
  EXPECT_EQ(traffic("host-kernel", 1000, 3).tx, 1000u);
  EXPECT_EQ(traffic("host-copy", 1000, 3).rx, 2000u);
  EXPECT_EQ(traffic("p2p-ll", 1000, 4).tx, 3000u);
  EXPECT_EQ(traffic("p2p-twoshot", 1200, 3).tx, 1600u);
  EXPECT_EQ(traffic("nccl", 1000, 2).rx, 1000u);
  // A compressed wire counts its payload: 1 MiB of bf16 on int8 is 0.53 MiB a peer.
  EXPECT_EQ(algorithmOf(pathByName("host-copy+int8"))->traffic(1 << 20, 1 << 19, 2).tx,
            wirePayloadBytes(WireCode::kInt8, 1 << 19));
  EXPECT_EQ(algorithmOf(pathByName("host-copy+int8"))->traffic(64 << 20, 32 << 20, 2).tx,
            2 * wirePayloadBytes(WireCode::kInt8, 16 << 20))
      << "two rounds of 32 MiB, a payload each";
  // Two-shot on a wire: a slice payload to each peer in each phase; 3 ranks of 3 x 4096 values.
  EXPECT_EQ(algorithmOf(pathByName("p2p-twoshot+fp8"))->traffic(3 * 8192, 3 * 4096, 3).tx,
            4 * wirePayloadBytes(WireCode::kFp8, 4096));
}

TEST(AlgorithmRegistry, SelfCheckCallsReachTheirAlgorithm) {
  for (int p : pathsOf(tpsBackendP2p, 2, kOneProcess)) {
    const AlgorithmInfo* a = algorithmOf(p);
    if (a->wire != WireCode::kExact) {  // the self-check compares exact sums; a wire's is lossy by design
      EXPECT_EQ(a->selfcheck_count, 0u) << a->name;
      continue;
    }
    ASSERT_GT(a->selfcheck_count, 0u) << a->name;
    EXPECT_EQ(chooseAlgorithm(pathsOf(tpsBackendP2p, 2, kOneProcess), a->selfcheck_count * 4, tpsFloat32, 2,
                              kOneProcess, tuned(4u << 20)),
              p)
        << a->name;
  }
}

}  // namespace
}  // namespace tpscope::detail
