// SPDX-License-Identifier: Apache-2.0
// workload_capture_test - the AllReduce capture's folder (src/workload/capture.h) and the token decode's
// files (src/workload/token_decode.h: .npy logits, the tokens list, argmax), all host-side.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "workload/capture.h"
#include "workload/token_decode.h"

namespace tpscope::workload {
namespace {

class WorkloadFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (std::filesystem::temp_directory_path() /
            ("tpscope_capture_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "_" +
             std::to_string(::getpid())))
               .string();
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

CapturedCall call(const char* phase, int layer, int tokens, int keep) {
  CapturedCall c;
  c.phase = phase, c.layer = layer, c.which = layer % 2 ? "ffn_down" : "attention_out";
  c.tokens = tokens, c.hidden = 8, c.ranks = 2;
  c.rows = capturedRows(tokens, keep);
  return c;
}

// Rank r's value i of a call: a bfloat16 that tells the call, the rank and the index apart.
std::vector<std::vector<uint16_t>> values(const CapturedCall& c, int tag) {
  std::vector<std::vector<uint16_t>> v(c.ranks);
  for (int r = 0; r < c.ranks; ++r)
    for (uint64_t i = 0; i < c.rankValues(); ++i) {
      const float x = static_cast<float>(tag * 1000 + r * 100 + static_cast<int>(i));
      uint32_t u;
      std::memcpy(&u, &x, 4);
      v[r].push_back(static_cast<uint16_t>(u >> 16));  // truncated to bfloat16
    }
  return v;
}

TEST(WorkloadCapture, RowsAreAllOrSpreadEvenly) {
  EXPECT_EQ(capturedRows(1, 16), std::vector<int>({0}));
  EXPECT_EQ(capturedRows(4, 0), std::vector<int>({0, 1, 2, 3}));
  EXPECT_EQ(capturedRows(4, 4), std::vector<int>({0, 1, 2, 3}));
  EXPECT_EQ(capturedRows(512, 4), std::vector<int>({0, 128, 256, 384}));
  EXPECT_EQ(capturedRows(10, 3), std::vector<int>({0, 3, 6}));
}

TEST_F(WorkloadFiles, CaptureRoundTrips) {
  CaptureWriter w;
  std::string error;
  ASSERT_TRUE(w.open(dir_, {{"preset", "tiny"}, {"wire", "exact"}}, &error)) << error;
  const CapturedCall a = call("decode", 0, 1, 0), b = call("decode", 1, 1, 0), p = call("prefill", 0, 6, 2);
  ASSERT_TRUE(w.append(a, values(a, 0), &error)) << error;
  ASSERT_TRUE(w.append(p, values(p, 0), &error)) << error;
  ASSERT_TRUE(w.append(b, values(b, 1), &error)) << error;
  ASSERT_TRUE(w.finish(&error)) << error;

  CaptureIndex index;
  ASSERT_TRUE(readCaptureIndex(dir_, &index, &error)) << error;
  EXPECT_EQ(index.model["preset"], "tiny");
  ASSERT_EQ(index.calls.size(), 3u);
  EXPECT_EQ(index.calls[0].file, "decode.bin");
  EXPECT_EQ(index.calls[0].offset, 0u);
  EXPECT_EQ(index.calls[1].file, "prefill.bin");
  EXPECT_EQ(index.calls[1].offset, 0u);
  EXPECT_EQ(index.calls[2].offset, 2u * 8 * 2);  // after the first decode call's two ranks of 8 values
  EXPECT_EQ(index.calls[1].rows, std::vector<int>({0, 3}));
  EXPECT_EQ(std::filesystem::file_size(dir_ + "/prefill.bin"), 2u * 2 * 8 * 2);
  std::vector<std::vector<float>> ranks;
  ASSERT_TRUE(readCapturedCall(dir_, index.calls[2], &ranks, &error)) << error;
  ASSERT_EQ(ranks.size(), 2u);
  EXPECT_EQ(ranks[1][5], 1000.0f + 100 + 5 - 1);  // 1105 in bfloat16 (8 significant bits) is 1104
  EXPECT_EQ(ranks[0][0], 1000.0f);
  ASSERT_TRUE(readCapturedCall(dir_, index.calls[1], &ranks, &error)) << error;
  EXPECT_EQ(ranks[1][15], 115.0f);

  // A second capture in the same folder replaces the data files.
  ASSERT_TRUE(w.open(dir_, {}, &error)) << error;
  ASSERT_TRUE(w.append(a, values(a, 2), &error)) << error;
  ASSERT_TRUE(w.finish(&error)) << error;
  EXPECT_EQ(std::filesystem::file_size(dir_ + "/decode.bin"), 2u * 8 * 2);
}

TEST_F(WorkloadFiles, BrokenCapturesAreRefused) {
  CaptureWriter w;
  std::string error;
  ASSERT_TRUE(w.open(dir_, {}, &error)) << error;
  const CapturedCall a = call("decode", 0, 1, 0);
  EXPECT_FALSE(w.append(a, {{1, 2}}, &error));  // one rank array for two ranks
  ASSERT_TRUE(w.append(a, values(a, 0), &error)) << error;
  ASSERT_TRUE(w.finish(&error)) << error;
  CaptureIndex index;
  ASSERT_TRUE(readCaptureIndex(dir_, &index, &error)) << error;

  const nlohmann::json good = captureIndexJson(index);
  auto refused = [&](nlohmann::json doc, const char* says) {
    CaptureIndex out;
    std::string e;
    EXPECT_FALSE(parseCaptureIndex(doc, &out, &e)) << doc.dump();
    EXPECT_NE(e.find(says), std::string::npos) << e;
  };
  nlohmann::json bad = good;
  bad["format"] = "something-else";
  refused(bad, "not a capture index");
  bad = good, bad["version"] = 2;
  refused(bad, "version");
  bad = good, bad["dtype"] = "float32";
  refused(bad, "bfloat16");
  bad = good, bad["calls"][0]["rows"] = {0, 0};
  refused(bad, "rows must ascend");
  bad = good, bad["calls"][0]["rows"] = {1};  // a decode call has row 0 only
  refused(bad, "rows must ascend");
  bad = good, bad["calls"][0]["file"] = "../decode.bin";
  refused(bad, "plain file name");
  bad = good, bad["calls"][0].erase("hidden");
  refused(bad, "missing");
  bad = good, bad["calls"][0]["which"] = "qkv";
  refused(bad, "which");

  std::filesystem::resize_file(dir_ + "/decode.bin", 20);  // rank 1's array cut short
  std::vector<std::vector<float>> ranks;
  EXPECT_FALSE(readCapturedCall(dir_, index.calls[0], &ranks, &error));
  EXPECT_NE(error.find("rank 1"), std::string::npos) << error;
  std::ofstream(dir_ + "/index.json") << "{not json";
  EXPECT_FALSE(readCaptureIndex(dir_, &index, &error));
  EXPECT_NE(error.find("not JSON"), std::string::npos) << error;
}

TEST_F(WorkloadFiles, NpyHeaderIsNumpysFormat) {
  const std::string h = npyHeader({3, 5});
  ASSERT_EQ(h.size() % 64, 0u);
  EXPECT_EQ(h.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  const size_t len = static_cast<unsigned char>(h[8]) | static_cast<unsigned char>(h[9]) << 8;
  EXPECT_EQ(len + 10, h.size());
  EXPECT_EQ(h.back(), '\n');
  EXPECT_NE(h.find("{'descr': '<f4', 'fortran_order': False, 'shape': (3,5), }"), std::string::npos) << h;
  EXPECT_NE(npyHeader({7}).find("'shape': (7,)"), std::string::npos);

  std::filesystem::create_directories(dir_);
  const float data[6] = {1, 2, 3, 4, 5, -6};
  std::string error;
  ASSERT_TRUE(writeNpy(dir_ + "/a.npy", data, {2, 3}, &error)) << error;
  EXPECT_EQ(std::filesystem::file_size(dir_ + "/a.npy"), npyHeader({2, 3}).size() + sizeof data);
  EXPECT_FALSE(writeNpy(dir_ + "/no/such/folder/a.npy", data, {2, 3}, &error));
}

TEST_F(WorkloadFiles, TokensComeFromARunsDocument) {
  std::filesystem::create_directories(dir_);
  std::ofstream(dir_ + "/run.json") << R"({"wire": "exact", "tokens": [5, 0, 31999], "greedy": [1]})";
  std::vector<int> t;
  std::string error;
  ASSERT_TRUE(readTokens(dir_ + "/run.json", &t, &error)) << error;
  EXPECT_EQ(t, std::vector<int>({5, 0, 31999}));
  std::ofstream(dir_ + "/bad.json") << R"({"tokens": [1, "two"]})";
  EXPECT_FALSE(readTokens(dir_ + "/bad.json", &t, &error));
  std::ofstream(dir_ + "/none.json") << R"({"greedy": [1]})";
  EXPECT_FALSE(readTokens(dir_ + "/none.json", &t, &error));
  EXPECT_FALSE(readTokens(dir_ + "/missing.json", &t, &error));
}

TEST(WorkloadTokenDecode, ArgmaxTakesTheFirstLargestAndSkipsNaN) {
  const float v[] = {1, 3, 2, 3};
  EXPECT_EQ(argmax(v, 4), 1);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float w[] = {nan, -5, -1, nan};
  EXPECT_EQ(argmax(w, 4), 2);
}

}  // namespace
}  // namespace tpscope::workload
