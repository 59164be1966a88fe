// SPDX-License-Identifier: Apache-2.0
// bench_args_test - size sweeps, type and backend names, device sets of `tpscope bench allreduce`.
#include <gtest/gtest.h>

#include <climits>
#include <stdexcept>

#include "bench/args.h"
#include "cli.h"

namespace tpscope::cli {
namespace {

TEST(BenchSweep, FactorSweepMatchesAllReducePerf) {
  // all_reduce_perf -b 8K -e 256M -f 2 runs these 16 sizes.
  SweepSpec s;
  s.min_bytes = 8 << 10;
  s.max_bytes = 256 << 20;
  s.step_factor = 2;
  std::vector<uint64_t> want;
  for (uint64_t v = 8192; v <= 268435456; v *= 2) want.push_back(v);
  EXPECT_EQ(want.size(), 16u);
  EXPECT_EQ(sizeSweep(s), want);
}

TEST(BenchSweep, MaxIsIncludedOnlyWhenReached) {
  SweepSpec s;
  s.min_bytes = 3;
  s.max_bytes = 100;
  s.step_factor = 3;
  EXPECT_EQ(sizeSweep(s), (std::vector<uint64_t>{3, 9, 27, 81}));
  s.min_bytes = s.max_bytes = 4096;
  EXPECT_EQ(sizeSweep(s), (std::vector<uint64_t>{4096}));
}

TEST(BenchSweep, FactorOneAddsStepBytes) {
  SweepSpec s;
  s.min_bytes = 1 << 20;
  s.max_bytes = 4 << 20;
  s.step_factor = 1;
  s.step_bytes = 1 << 20;
  EXPECT_EQ(sizeSweep(s), (std::vector<uint64_t>{1 << 20, 2 << 20, 3 << 20, 4 << 20}));
}

TEST(BenchSweep, BadSweepsAreUsageErrors) {
  SweepSpec empty;
  empty.min_bytes = 1 << 20;
  empty.max_bytes = 8 << 10;
  EXPECT_THROW(sizeSweep(empty), UsageError);
  SweepSpec zero;
  zero.min_bytes = 0;
  EXPECT_THROW(sizeSweep(zero), UsageError);
  SweepSpec no_step;
  no_step.step_factor = 1;
  no_step.step_bytes = 0;
  EXPECT_THROW(sizeSweep(no_step), UsageError);
  SweepSpec zero_factor;
  zero_factor.step_factor = 0;
  EXPECT_THROW(sizeSweep(zero_factor), UsageError);
  SweepSpec endless;  // 8K to 256M in steps of 8 bytes: 33 million sizes
  endless.step_factor = 1;
  endless.step_bytes = 8;
  EXPECT_THROW(sizeSweep(endless), UsageError);
}

TEST(BenchSweep, HugeFactorStopsInsteadOfWrapping) {
  SweepSpec s;
  s.min_bytes = 1ull << 62;
  s.max_bytes = UINT64_MAX;
  s.step_factor = 8;
  EXPECT_EQ(sizeSweep(s), (std::vector<uint64_t>{1ull << 62}));
  // 0.26 * 2^64 * 7 wraps to a value above the start; the sweep must still stop.
  s.min_bytes = UINT64_MAX / 100 * 26;
  s.step_factor = 7;
  EXPECT_EQ(sizeSweep(s).size(), 1u);
  s.step_factor = 1;
  s.step_bytes = UINT64_MAX / 2;
  EXPECT_EQ(sizeSweep(s).size(), 2u);  // one step fits below 2^64, the next would not
}

TEST(BenchSweep, CountsRoundDownToWholeElementsAndDropRepeats) {
  // nccl-tests semantics: count = size / element size; 6 and 7 bytes of float are both one element.
  EXPECT_EQ(sweepCounts({6, 7, 8, 12}, tpsFloat32), (std::vector<size_t>{1, 2, 3}));
  EXPECT_EQ(sweepCounts({6, 18, 54}, tpsBfloat16), (std::vector<size_t>{3, 9, 27}));
  EXPECT_THROW(sweepCounts({2, 4}, tpsFloat32), UsageError);  // 2 bytes: no whole float
}

TEST(BenchArgs, DataTypeNamesAndAliases) {
  EXPECT_EQ(parseDataTypes("float"), std::vector<tpsDataType_t>{tpsFloat32});
  EXPECT_EQ(parseDataTypes("f32"), std::vector<tpsDataType_t>{tpsFloat32});
  EXPECT_EQ(parseDataTypes("half"), std::vector<tpsDataType_t>{tpsFloat16});
  EXPECT_EQ(parseDataTypes("f16"), std::vector<tpsDataType_t>{tpsFloat16});
  EXPECT_EQ(parseDataTypes("bfloat16"), std::vector<tpsDataType_t>{tpsBfloat16});
  EXPECT_EQ(parseDataTypes("bf16"), std::vector<tpsDataType_t>{tpsBfloat16});
  EXPECT_EQ(parseDataTypes("all"), (std::vector<tpsDataType_t>{tpsFloat32, tpsFloat16, tpsBfloat16}));
  EXPECT_THROW(parseDataTypes("int8"), UsageError);
  EXPECT_THROW(parseDataTypes("BF16"), UsageError);
}

TEST(BenchArgs, BackendListKeepsOrder) {
  EXPECT_EQ(parseBackends("nccl,host"), (std::vector<tpsBackend_t>{tpsBackendNccl, tpsBackendHost}));
  EXPECT_EQ(parseBackends("all"), (std::vector<tpsBackend_t>{tpsBackendHost, tpsBackendP2p, tpsBackendNccl}));
  EXPECT_EQ(parseBackends("auto"), std::vector<tpsBackend_t>{tpsBackendAuto});
  for (const char* bad : {"", "host,", "shm", "host,host", "host,,nccl"})
    EXPECT_THROW(parseBackends(bad), UsageError) << bad;
}

TEST(BenchArgs, WireListKeepsOrderAndRefusesWhatIsNotAWire) {
  EXPECT_EQ(parseWires("exact,int8,fp8"), (std::vector<tpsWire_t>{tpsWireExact, tpsWireInt8, tpsWireFp8}));
  EXPECT_EQ(parseWires("int4,exact"), (std::vector<tpsWire_t>{tpsWireInt4, tpsWireExact}));
  EXPECT_EQ(parseWires("all"),
            (std::vector<tpsWire_t>{tpsWireExact, tpsWireBf16, tpsWireInt8, tpsWireFp8, tpsWireInt4}));
  for (const char* bad : {"", "int9", "exact,", ",int8", "int8,int8", "EXACT", "exact int8"})
    EXPECT_THROW(parseWires(bad), UsageError) << bad;
  try {
    parseWires("exact,auto:0.01");
    FAIL() << "auto is a policy, not a wire";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("TPSCOPE_WIRE"), std::string::npos) << e.what();
  }
}

TEST(BenchArgs, RatioReferenceIsNcclWhenListedElseFirst) {
  EXPECT_EQ(ratioReference({tpsBackendHost, tpsBackendNccl}), tpsBackendNccl);
  EXPECT_EQ(ratioReference({tpsBackendP2p, tpsBackendHost}), tpsBackendP2p);
}

TEST(BenchArgs, SizeFlags) {
  EXPECT_EQ(parseSizeFlag("8K", "-b"), 8192u);
  EXPECT_EQ(parseSizeFlag("256M", "-e"), 256u << 20);
  EXPECT_EQ(parseSizeFlag("1G", "-e"), 1u << 30);
  EXPECT_EQ(parseSizeFlag("4096", "-b"), 4096u);
  try {
    parseSizeFlag("8Q", "-b");
    FAIL() << "8Q parsed";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("-b"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parseSizeFlag("-8K", "-b"), UsageError);
}

TEST(BenchArgs, DeviceSets) {
  EXPECT_EQ(resolveDevices(0, "", 4), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(resolveDevices(0, "", 16).size(), 8u);  // at most TPS_MAX_DEVICES by default
  EXPECT_EQ(resolveDevices(2, "", 4), (std::vector<int>{0, 1}));
  EXPECT_EQ(resolveDevices(0, "3,1", 4), (std::vector<int>{3, 1}));
  EXPECT_EQ(resolveDevices(0, "0,0", 1), (std::vector<int>{0, 0}));  // ranks sharing GPU 0
  EXPECT_THROW(parseDeviceList("0,0", "--devices"), UsageError);     // elsewhere a GPU given twice is an error
  EXPECT_THROW(resolveDevices(1, "", 4), UsageError);
  EXPECT_THROW(resolveDevices(4, "", 2), UsageError);
  EXPECT_THROW(resolveDevices(0, "0", 4), UsageError);
  EXPECT_THROW(resolveDevices(0, "0,1,2,3,4,5,6,7,8", INT_MAX), UsageError);
  // Too few GPUs with no flag is the machine's fault, not the command line's: a runtime error.
  try {
    resolveDevices(0, "", 1);
    FAIL() << "one GPU accepted";
  } catch (const UsageError&) {
    FAIL() << "reported as a usage error";
  } catch (const std::runtime_error&) {
  }
}

}  // namespace
}  // namespace tpscope::cli
