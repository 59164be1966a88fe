// SPDX-License-Identifier: Apache-2.0
// bench_nccl_symm_test - the nccl-symm column of `tpscope bench allreduce` without a GPU: its name on the
// command line, why it is N/A where it cannot run, its path and bytes columns, and its rows and context
// in the table and JSON (the same keys as every other column).
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "bench/args.h"
#include "bench/nccl_symm.h"
#include "bench/table.h"
#include "cli.h"
#include "cli_runner.h"

namespace tpscope::cli {
namespace {

BenchRow row(tpsBackend_t backend, size_t count) {
  BenchRow r;
  r.backend = backend;
  r.path = backend == kBenchNcclSymm ? "" : "p2p-ll";
  r.dtype = tpsBfloat16;
  r.count = count;
  r.calls = 20;
  r.time = {7.5, 7.0, 7.4, 9.0};
  r.check = CheckCounts{};
  if (backend == kBenchNcclSymm)
    setNcclSymmAccounting(&r, 2);
  else
    r.bytes_per_call = MediumBytes{0, 0, 8192, 8192, 0, 0};
  setBandwidths(&r, 2);
  return r;
}

NcclSymmInfo availableInfo() {
  NcclSymmInfo i;
  i.requested = i.available = true;
  i.built_version = i.loaded_version = 22809;
  i.window_bytes = 1u << 30;
  i.nvls_enable = "0";
  i.estimates = {{tpsBfloat16, 8192, 6.25}, {tpsBfloat16, 16384, std::nullopt}};
  return i;
}

TEST(BenchNcclSymm, IsAColumnNotALibraryBackend) {
  EXPECT_STREQ(benchBackendName(kBenchNcclSymm), "nccl-symm");
  EXPECT_STREQ(benchBackendName(tpsBackendP2p), "p2p");
  for (int b = 0; b < tpsNumBackends; ++b) EXPECT_NE(static_cast<int>(kBenchNcclSymm), b);
  EXPECT_EQ(parseBackends("p2p,nccl,nccl-symm"),
            (std::vector<tpsBackend_t>{tpsBackendP2p, tpsBackendNccl, kBenchNcclSymm}));
  // "all" stays the library's backends: the column is asked for by name.
  EXPECT_EQ(parseBackends("all"), (std::vector<tpsBackend_t>{tpsBackendHost, tpsBackendP2p, tpsBackendNccl}));
  EXPECT_THROW(parseBackends("nccl-symm,nccl-symm"), UsageError);
  EXPECT_THROW(parseBackends("nccl-symmetric"), UsageError);
  EXPECT_EQ(ratioReference({kBenchNcclSymm, tpsBackendP2p}), kBenchNcclSymm);
  EXPECT_EQ(ratioReference({kBenchNcclSymm, tpsBackendNccl}), tpsBackendNccl);
}

TEST(BenchNcclSymm, SaysWhyItCannotRun) {
  const std::vector<int> two{0, 1};
  EXPECT_EQ(ncclSymmUnavailableReason(22809, 22809, two, "0"), "");
  EXPECT_EQ(ncclSymmUnavailableReason(22700, 0, two, "0"), "");  // loaded version unknown: let NCCL say
  const std::string old_headers = ncclSymmUnavailableReason(22603, 22809, two, "0");
  EXPECT_NE(old_headers.find("built against NCCL 2.26.3"), std::string::npos) << old_headers;
  const std::string old_library = ncclSymmUnavailableReason(22809, 22605, two, "0");
  EXPECT_NE(old_library.find("NCCL 2.26.5 is loaded"), std::string::npos) << old_library;
  EXPECT_NE(old_library.find(">= 2.27"), std::string::npos) << old_library;
  const std::string shared = ncclSymmUnavailableReason(22809, 22809, {0, 0}, "0");
  EXPECT_NE(shared.find("NCCL refuses two ranks on one GPU"), std::string::npos) << shared;
  EXPECT_NE(ncclSymmUnavailableReason(22809, 22809, {0}, "0").find("2 GPUs"), std::string::npos);
  for (const char* nvls : {static_cast<const char*>(nullptr), "1", "2"})
    EXPECT_NE(ncclSymmUnavailableReason(22809, 22809, two, nvls).find("NCCL_NVLS_ENABLE"), std::string::npos);
}

// Refusals come before any NCCL or CUDA call that needs a GPU, so they hold on this machine too.
TEST(BenchNcclSymm, CreateRefusesWithTheReasonAndNoNumbers) {
  NcclSymmInfo info;
  EXPECT_EQ(NcclSymm::create({0, 0}, 1u << 20, &info), nullptr);
  EXPECT_TRUE(info.requested);
  EXPECT_FALSE(info.available);
  EXPECT_NE(info.reason.find("two ranks on one GPU"), std::string::npos) << info.reason;
  EXPECT_GT(info.built_version, 0);
  EXPECT_EQ(info.window_bytes, 0u);
  const nlohmann::json j = ncclSymmJson(info);
  EXPECT_EQ(j["available"], false);
  EXPECT_EQ(j["reason"], info.reason);
  EXPECT_TRUE(j["window_bytes"].is_null());
  EXPECT_TRUE(j["nccl_estimates"].empty());
  const std::string p = formatNcclSymmPreamble(info);
  EXPECT_EQ(p.rfind("# nccl-symm: N/A (", 0), 0u) << p;
  EXPECT_NE(p.find(info.reason), std::string::npos) << p;
}

TEST(BenchNcclSymm, PathAndRingBytes) {
  BenchRow r = row(kBenchNcclSymm, 4096);  // 8 KiB per GPU
  EXPECT_EQ(r.path, "nccl-symm");
  ASSERT_TRUE(r.bytes_per_call.has_value());
  EXPECT_DOUBLE_EQ(r.bytes_per_call->nccl_tx, 8192.0);
  EXPECT_DOUBLE_EQ(r.bytes_per_call->nccl_rx, 8192.0);
  EXPECT_DOUBLE_EQ(r.bytes_per_call->host_tx + r.bytes_per_call->peer_tx, 0.0);
  setNcclSymmAccounting(&r, 4);
  EXPECT_DOUBLE_EQ(r.bytes_per_call->nccl_tx, 8192.0 * 1.5);
}

TEST(BenchNcclSymm, RowsHaveTheSameShapeAsEveryColumn) {
  const BenchRow symm = row(kBenchNcclSymm, 4096), p2p = row(tpsBackendP2p, 4096);
  const nlohmann::json a = rowJson(symm), b = rowJson(p2p);
  EXPECT_EQ(a["backend"], "nccl-symm");
  EXPECT_EQ(a["path"], "nccl-symm");
  std::set<std::string> ka, kb;
  for (auto it = a.begin(); it != a.end(); ++it) ka.insert(it.key());
  for (auto it = b.begin(); it != b.end(); ++it) kb.insert(it.key());
  EXPECT_EQ(ka, kb);
  EXPECT_EQ(a["bytes_per_call"]["nccl_tx"], 8192.0);
  // The table row lines up with the header, name included.
  EXPECT_EQ(formatRow(symm).size(), formatHeader().size()) << formatRow(symm) << formatHeader();
  const std::string ratios = formatRatios(timeRatios({p2p, symm}, {tpsBackendP2p, kBenchNcclSymm}, kBenchNcclSymm),
                                          {tpsBackendP2p, kBenchNcclSymm}, kBenchNcclSymm);
  EXPECT_NE(ratios.find("/ nccl-symm's"), std::string::npos) << ratios;
  EXPECT_NE(ratios.find("nccl-symm"), std::string::npos) << ratios;
}

TEST(BenchNcclSymm, ContextSaysWhatNcclSetUp) {
  BenchContext c;
  c.options.backends = {tpsBackendP2p, kBenchNcclSymm};
  EXPECT_FALSE(benchDocument(c, {})["context"].contains("nccl_symm"));  // not requested: no key
  c.nccl_symm = availableInfo();
  const nlohmann::json doc = benchDocument(c, {row(tpsBackendP2p, 4096), row(kBenchNcclSymm, 4096)});
  const nlohmann::json& j = doc["context"]["nccl_symm"];
  EXPECT_EQ(j["available"], true);
  EXPECT_TRUE(j["reason"].is_null());
  EXPECT_EQ(j["nccl_loaded_version"], "2.28.9");
  EXPECT_EQ(j["allocator"], "ncclMemAlloc");
  EXPECT_EQ(j["window_flags"], "NCCL_WIN_COLL_SYMMETRIC");
  EXPECT_EQ(j["window_bytes"], 1u << 30);
  EXPECT_EQ(j["nvls_enable"], "0");
  ASSERT_EQ(j["nccl_estimates"].size(), 2u);
  EXPECT_EQ(j["nccl_estimates"][0]["estimated_us"], 6.25);
  EXPECT_TRUE(j["nccl_estimates"][1]["estimated_us"].is_null());
  EXPECT_EQ(doc["context"]["backends"], (nlohmann::json{"p2p", "nccl-symm"}));
  EXPECT_EQ(doc["results"][1]["backend"], "nccl-symm");
  const std::string p = formatPreamble(c);
  EXPECT_NE(p.find("# nccl-symm: ncclAllReduce in place on ncclMemAlloc buffers (1073741824 B per GPU)"),
            std::string::npos)
      << p;
  EXPECT_NE(p.find("NCCL_NVLS_ENABLE=0"), std::string::npos) << p;
  EXPECT_NE(p.find("# backends: p2p,nccl-symm"), std::string::npos) << p;
}

TEST(BenchNcclSymm, CommandLine) {
  testing::CliResult r = testing::runTpscope("bench allreduce --backend nccl-symm,shm");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("nccl-symm"), std::string::npos) << r.err;  // the message lists the column's name
  r = testing::runTpscope("bench allreduce --help");
  EXPECT_NE(r.out.find("nccl-symm"), std::string::npos) << r.out;
  // A good command line on a machine without two GPUs is a runtime error, not a usage error.
  r = testing::runTpscope("bench allreduce --backend p2p,nccl-symm -b 8K -e 8K", "CUDA_VISIBLE_DEVICES=");
  EXPECT_EQ(r.exit_code, 1) << r.err;
}

}  // namespace
}  // namespace tpscope::cli
