// SPDX-License-Identifier: Apache-2.0
// allreduce_selector_test - unit tests for backend selection, names, tuning and CPU-side API checks.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "allreduce/selector.h"
#include "allreduce/tuning.h"
#include "tpscope/tpscope.h"

namespace tpscope::detail {
namespace {

TEST(Selector, BackendNamesParseExactly) {
  tpsBackend_t b = tpsBackendAuto;
  EXPECT_TRUE(parseBackendName("host", &b));
  EXPECT_EQ(b, tpsBackendHost);
  EXPECT_TRUE(parseBackendName("nccl", &b));
  EXPECT_EQ(b, tpsBackendNccl);
  EXPECT_TRUE(parseBackendName("p2p", &b));
  EXPECT_EQ(b, tpsBackendP2p);
  EXPECT_FALSE(parseBackendName("internal", &b));
  EXPECT_FALSE(parseBackendName("HOST", &b));
  EXPECT_FALSE(parseBackendName("", &b));
}

TEST(Selector, UnknownEnvironmentValueIsAnErrorNotAFallback) {
  tpsBackend_t b = tpsBackendAuto;
  std::string err;
  EXPECT_EQ(requestedBackend(tpsBackendAuto, "internal", &b, &err), tpsInvalidArgument);
  EXPECT_NE(err.find("TPSCOPE_ALLREDUCE=internal"), std::string::npos) << err;
  EXPECT_EQ(requestedBackend(tpsBackendAuto, "nccl", &b, &err), tpsSuccess);
  EXPECT_EQ(b, tpsBackendNccl);
  // A config field wins over the environment.
  EXPECT_EQ(requestedBackend(tpsBackendHost, "nccl", &b, &err), tpsSuccess);
  EXPECT_EQ(b, tpsBackendHost);
  EXPECT_EQ(requestedBackend(tpsBackendAuto, nullptr, &b, &err), tpsSuccess);
  EXPECT_EQ(b, tpsBackendAuto);
  EXPECT_EQ(requestedBackend(static_cast<tpsBackend_t>(42), nullptr, &b, &err), tpsInvalidArgument);
}

// Found by scripts/sanitize asan (UBSan: load of value 17, which is not a valid value for type
// 'tpsBackend_t', in CommInitRank.ArgumentsAreCheckedBeforeAnyJoin): a C caller's config.backend is read
// as the int it stored, never loaded as the enum before it is checked.
TEST(Selector, AConfigBackendOutsideTheEnumIsReadAsAnInt) {
  tpsConfig_t cfg;
  tpsConfigInit(&cfg);
  for (int v : {17, -1, 1 << 30}) {
    std::memcpy(&cfg.backend, &v, sizeof(v));  // what a C caller can store
    EXPECT_EQ(configBackendValue(cfg), v);
    tpsBackend_t b = tpsBackendAuto;
    std::string err;
    EXPECT_EQ(requestedBackend(configBackendValue(cfg), nullptr, &b, &err), tpsInvalidArgument);
    EXPECT_NE(err.find("config.backend " + std::to_string(v) + " is not a backend"), std::string::npos) << err;
  }
}

TEST(Selector, AutoPrefersDirectPathsThenStaging) {
  Availability a;
  a.host = a.nccl = true;
  a.all_peer_access = true;
  EXPECT_EQ(chooseAuto(a, 8192), tpsBackendNccl);
  a.p2p = true;
  EXPECT_EQ(chooseAuto(a, 8192), tpsBackendP2p);
  a.all_peer_access = false;  // no P2P: NCCL would use SHM, staging is the design for this box
  EXPECT_EQ(chooseAuto(a, 8192), tpsBackendHost);
  a.host = false;
  EXPECT_EQ(chooseAuto(a, 8192), tpsBackendNccl);
  a.nccl = false;
  EXPECT_EQ(chooseAuto(a, 8192), tpsBackendAuto);
}

AutoTable p2pThenNccl() {
  AutoTable t;
  t.fingerprint = "2xNVIDIA GeForce RTX 4090 PIX";
  t.ranges = {{size_t{1} << 20, tpsBackendP2p}, {std::nullopt, tpsBackendNccl}};
  return t;
}

TEST(Selector, AutoUsesTheMeasuredTableWhereItApplies) {
  Availability a;
  a.host = a.p2p = a.nccl = a.all_peer_access = true;
  const AutoTable t = p2pThenNccl();
  bool from_table = false;
  EXPECT_EQ(chooseAuto(a, 8192, &t, &from_table), tpsBackendP2p);
  EXPECT_TRUE(from_table);
  EXPECT_EQ(chooseAuto(a, 1u << 20, &t, &from_table), tpsBackendP2p);
  EXPECT_EQ(chooseAuto(a, (1u << 20) + 2, &t, &from_table), tpsBackendNccl);  // the built-in default says p2p
  EXPECT_TRUE(from_table);
  EXPECT_EQ(chooseAuto(a, (1u << 20) + 2, nullptr, &from_table), tpsBackendP2p);
  EXPECT_FALSE(from_table);
}

TEST(Selector, ATableNamingAnUnavailableBackendFallsBackToTheDefault) {
  Availability a;
  a.host = a.p2p = a.all_peer_access = true;  // NCCL did not start
  const AutoTable t = p2pThenNccl();
  bool from_table = true;
  EXPECT_EQ(chooseAuto(a, 64u << 20, &t, &from_table), tpsBackendP2p);
  EXPECT_FALSE(from_table);
  EXPECT_EQ(chooseAuto(a, 8192, &t, &from_table), tpsBackendP2p);
  EXPECT_TRUE(from_table);
  a.p2p = false;  // p2p did not start either: the table applies nowhere
  EXPECT_EQ(chooseAuto(a, 8192, &t, &from_table), tpsBackendHost);
  EXPECT_FALSE(from_table);
  AutoTable empty;
  EXPECT_EQ(chooseAuto(a, 8192, &empty, &from_table), tpsBackendHost);
  EXPECT_FALSE(from_table);
}

TEST(Selector, BuiltInDefaultsForNvlinkPcieP2pAndNoP2pBoxes) {
  // NVLink and PCIe P2P boxes look alike to the selector: every pair has peer access, p2p is up.
  Availability peer;
  peer.host = peer.p2p = peer.nccl = peer.all_peer_access = true;
  for (size_t bytes : {size_t{8} << 10, size_t{1} << 20, size_t{1} << 30})
    EXPECT_EQ(chooseAuto(peer, bytes), tpsBackendP2p);
  // No P2P: the communicator does not create p2p; staging beats NCCL over host memory (docs/PERFORMANCE.md).
  Availability staged;
  staged.host = staged.nccl = true;
  for (size_t bytes : {size_t{8} << 10, size_t{1} << 20, size_t{1} << 30})
    EXPECT_EQ(chooseAuto(staged, bytes), tpsBackendHost);
  EXPECT_EQ(defaultAuto(Availability{}), tpsBackendAuto);
  EXPECT_FALSE(isAvailable(peer, tpsBackendAuto));
}

TEST(Names, SizeClassesAndTypes) {
  EXPECT_EQ(tpsSizeClassOf(8192), 0);
  EXPECT_EQ(tpsSizeClassOf(64 << 10), 0);
  EXPECT_EQ(tpsSizeClassOf((64 << 10) + 1), 1);
  EXPECT_EQ(tpsSizeClassOf(256u << 20), 3);
  EXPECT_EQ(tpsSizeClassOf(1u << 30), 4);
  EXPECT_STREQ(tpsSizeClassName(0), "<=64KiB");
  EXPECT_STREQ(tpsSizeClassName(9), "unknown");
  EXPECT_EQ(tpsDataTypeSize(tpsBfloat16), 2u);
  EXPECT_EQ(tpsDataTypeSize(tpsFloat32), 4u);
  EXPECT_EQ(tpsDataTypeSize(static_cast<tpsDataType_t>(7)), 0u);
  EXPECT_STREQ(tpsDataTypeName(tpsBfloat16), "bfloat16");
  EXPECT_STREQ(tpsPathName(tpsPathHostCopyEngine), "host-copy");
  EXPECT_STREQ(tpsBackendName(tpsBackendNccl), "nccl");
}

TEST(Tuning, PrecedenceIsConfigOverEnvironmentOverFileOverDefaults) {
  const std::string file = "/tmp/tpscope_tuning_test.json";
  std::ofstream(file) << R"({"host_copy_threshold": 524288, "host_chunk_bytes": 2097152, "host_blocks": 12})";
  setenv("TPSCOPE_TUNE_FILE", file.c_str(), 1);  // read once per process: this test owns it
  tpsConfig_t cfg;
  tpsConfigInit(&cfg);
  HostTuning t;
  ASSERT_EQ(resolveHostTuning(cfg, &t), tpsSuccess);
  EXPECT_EQ(t.copy_threshold, 524288u);
  EXPECT_EQ(t.chunk_bytes, 2097152u);
  EXPECT_EQ(t.blocks, 12);
  EXPECT_NE(t.source.find("tune file"), std::string::npos);
  cfg.host_blocks = 4;
  cfg.spin_timeout_ms = 250;
  ASSERT_EQ(resolveHostTuning(cfg, &t), tpsSuccess);
  EXPECT_EQ(t.blocks, 4);
  EXPECT_EQ(t.spin_timeout_ms, 250u);
  EXPECT_EQ(t.source, "config");
  cfg.host_blocks = 100;
  EXPECT_EQ(resolveHostTuning(cfg, &t), tpsInvalidArgument);
  cfg.host_blocks = 0;
  cfg.host_chunk_bytes = 1000;
  EXPECT_EQ(resolveHostTuning(cfg, &t), tpsInvalidArgument);
  // A bad value in the file is a WARN and that key's default, never a failure or an exception.
  std::ofstream(file) << R"({"host_copy_threshold": "4M", "host_chunk_bytes": 1000, "host_blocks": 100,
                             "auto": {"fingerprint": 3}})";
  tpsConfigInit(&cfg);
  ASSERT_EQ(resolveHostTuning(cfg, &t), tpsSuccess);
  EXPECT_EQ(t.copy_threshold, 4u << 20);
  EXPECT_EQ(t.chunk_bytes, 4u << 20);
  EXPECT_EQ(t.blocks, 32);
  std::ofstream(file) << R"({"host_blocks": -3, "host_copy_threshold": 1.5})";
  ASSERT_EQ(resolveHostTuning(cfg, &t), tpsSuccess);
  EXPECT_EQ(t.blocks, 32);
  EXPECT_EQ(t.copy_threshold, 4u << 20);
  std::ofstream(file) << "{ not json";
  ASSERT_EQ(resolveHostTuning(cfg, &t), tpsSuccess);
  EXPECT_EQ(t.source, "built-in");
  std::remove(file.c_str());
}

TEST(Api, BadArgumentsAreRefusedBeforeAnyGpuWork) {
  tpsComm_t comm = reinterpret_cast<tpsComm_t>(0x1);
  int devs[9] = {0, 1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_EQ(tpsCommCreate(&comm, 1, devs, nullptr), tpsInvalidArgument);
  EXPECT_EQ(comm, nullptr);
  EXPECT_EQ(tpsCommCreate(&comm, 9, devs, nullptr), tpsInvalidArgument);
  EXPECT_EQ(tpsCommCreate(nullptr, 2, devs, nullptr), tpsInvalidArgument);
  EXPECT_EQ(tpsCommCreate(&comm, 2, nullptr, nullptr), tpsInvalidArgument);
  EXPECT_EQ(tpsAllReduce(nullptr, nullptr, 1, tpsFloat32, nullptr), tpsInvalidArgument);
  EXPECT_EQ(tpsAllReduceWire(nullptr, tpsBackendAuto, tpsWireExact, nullptr, 1, tpsFloat32, nullptr),
            tpsInvalidArgument);
  EXPECT_EQ(tpsConfigInit(nullptr), tpsInvalidArgument);
  tpsResult_t e;
  EXPECT_EQ(tpsCommGetAsyncError(nullptr, &e), tpsInvalidArgument);
  EXPECT_EQ(tpsCommDestroy(nullptr), tpsSuccess);
}

// The call's backend and wire are checked before the communicator is read, so a handle that is no
// communicator is never dereferenced for them.
TEST(Api, AllReduceWireRefusesAWireOutsideTheEnum) {
  const tpsComm_t not_read = reinterpret_cast<tpsComm_t>(0x1);
  for (int bad : {-1, static_cast<int>(tpsNumWires), 99})
    EXPECT_EQ(tpsAllReduceWire(not_read, tpsBackendAuto, static_cast<tpsWire_t>(bad), nullptr, 1, tpsFloat32, nullptr),
              tpsInvalidArgument)
        << bad;
  EXPECT_EQ(tpsAllReduceWire(not_read, static_cast<tpsBackend_t>(tpsNumBackends), tpsWireExact, nullptr, 1, tpsFloat32,
                             nullptr),
            tpsInvalidArgument);
}

}  // namespace
}  // namespace tpscope::detail

// The C++ wrapper compiles, owns nothing when empty, and passes the C status through.
#include "tpscope/tpscope.hpp"
TEST(CppWrapper, EmptyCommunicatorReportsInvalidArgument) {
  tpscope::Communicator c;
  EXPECT_FALSE(c);
  EXPECT_EQ(c.allReduce(nullptr, 1, tpsFloat32, nullptr), tpsInvalidArgument);
  EXPECT_EQ(c.allReduce(nullptr, 1, tpsFloat32, nullptr, tpsBackendAuto, tpsWireExact), tpsInvalidArgument);
  EXPECT_EQ(c.asyncError(), tpsInvalidArgument);
  tpscope::Communicator d;
  EXPECT_EQ(tpscope::Communicator::create({0}, &d), tpsInvalidArgument);  // one GPU is not a communicator
  EXPECT_FALSE(d);
}
