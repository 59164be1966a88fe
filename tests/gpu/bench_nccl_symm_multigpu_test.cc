// SPDX-License-Identifier: Apache-2.0
// bench_nccl_symm_multigpu_test - the nccl-symm column of `tpscope bench allreduce` on 2 real GPUs: NCCL on
// symmetric windows sums right for every type and odd counts, eager and under CUDA-graph replay, beside p2p,
// and the JSON context says what was registered. Skips, with NCCL's reason, where the column is N/A.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "../unit/tools/cli_runner.h"
#include "gpu_test_util.h"

namespace tpscope::testing {
namespace {

// Odd counts (-b 6 -f 3: 3, 9, 27, ... bf16 and half elements) up to 2 MiB, every type; no meter.
nlohmann::json symmSweep(const std::string& mode) {
  const CliResult r = runTpscope(
      "bench allreduce --devices 0,1 -b 6 -e 2M -f 3 -n 3 -w 1 -c 1 -d all --backend p2p,nccl-symm "
      "--format json --no-meter " +
      mode);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
}

void expectSymmRowsRight(const nlohmann::json& doc) {
  ASSERT_FALSE(doc.is_discarded());
  const nlohmann::json& symm = doc["context"]["nccl_symm"];
  ASSERT_TRUE(symm.is_object()) << doc["context"].dump();
  if (!symm["available"].get<bool>()) GTEST_SKIP() << "nccl-symm is N/A here: " << symm["reason"];
  EXPECT_EQ(symm["nvls_enable"], "0");
  EXPECT_EQ(symm["window_flags"], "NCCL_WIN_COLL_SYMMETRIC");
  EXPECT_GE(symm["window_bytes"].get<uint64_t>(), 2u << 20);
  std::set<std::string> seen;
  size_t symm_rows = 0;
  for (const auto& row : doc["results"]) {
    seen.insert(row["backend"].get<std::string>());
    EXPECT_EQ(row["n_wrong"], 0) << row.dump();
    if (row["backend"] != "nccl-symm") continue;
    ++symm_rows;
    EXPECT_EQ(row["path"], "nccl-symm") << row.dump();
    EXPECT_GT(row["bytes_per_call"]["nccl_tx"].get<double>(), 0.0) << row.dump();
  }
  EXPECT_EQ(seen, (std::set<std::string>{"p2p", "nccl-symm"}));
  EXPECT_GE(symm_rows, 30u);  // 3 types x ~12 sizes
  EXPECT_EQ(symm["nccl_estimates"].size(), symm_rows);
}

TEST(BenchNcclSymmMultiGpu, EagerIsRightBesideP2p) {
  TPS_REQUIRE_GPUS(2);
  expectSymmRowsRight(symmSweep(""));
}

TEST(BenchNcclSymmMultiGpu, GraphReplayIsRightBesideP2p) {
  TPS_REQUIRE_GPUS(2);
  const nlohmann::json doc = symmSweep("--graph --graph-replays 2");
  expectSymmRowsRight(doc);
  if (!doc.is_discarded()) EXPECT_EQ(doc["context"]["graph"], true);
}

}  // namespace
}  // namespace tpscope::testing
