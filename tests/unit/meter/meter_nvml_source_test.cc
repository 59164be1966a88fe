// SPDX-License-Identifier: Apache-2.0
// meter_nvml_source_test - the NVML counter reader against a scripted NVML function table: probing,
// N/A fields, the PCIe and NVLink groups read apart, summing NVLink links (KiB -> bytes) over one or
// several calls, value widths, per-field timestamps, failed reads.
#include <gtest/gtest.h>

#include <map>

#include "meter/nvml_platform.h"

namespace tpscope::detail {
namespace {

// What the stub NVML answers: a value per (field, scope), fields that fail, a timestamp source.
struct Script {
  std::map<std::pair<unsigned, unsigned>, unsigned long long> values;
  std::vector<unsigned> unsupported_fields;
  std::pair<unsigned, unsigned> fail_once{~0u, ~0u};  // (field, scope) failing on the next call only
  bool whole_call_fails = false;
  long long timestamp_us = 0;  // 0: NVML gives none
  int calls = 0;
  int last_count = 0;  // fields asked for in the last call
};
Script g_script;

nvmlReturn_t stubFieldValues(nvmlDevice_t, int count, nvmlFieldValue_t* v) {
  ++g_script.calls;
  g_script.last_count = count;
  if (g_script.whole_call_fails) return NVML_ERROR_UNKNOWN;
  for (int i = 0; i < count; ++i) {
    const unsigned f = v[i].fieldId, s = v[i].scopeId;
    bool unsupported = false;
    for (unsigned u : g_script.unsupported_fields) unsupported = unsupported || u == f;
    if (unsupported || g_script.fail_once == std::make_pair(f, s)) {
      v[i].nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
      continue;
    }
    v[i].nvmlReturn = NVML_SUCCESS;
    v[i].timestamp = g_script.timestamp_us;
    const unsigned long long x = g_script.values[{f, s}];
    if (f == kFieldPcieTx || f == kFieldPcieRx) {
      v[i].valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
      v[i].value.uiVal = static_cast<unsigned>(x);
    } else {
      v[i].valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
      v[i].value.ullVal = x;
    }
  }
  g_script.fail_once = {~0u, ~0u};
  return NVML_SUCCESS;
}

nvml::Api stubApi() {
  nvml::Api api;
  api.deviceGetFieldValues = stubFieldValues;
  api.errorString = [](nvmlReturn_t r) -> const char* { return r == NVML_ERROR_UNKNOWN ? "Unknown Error" : "other"; };
  return api;
}

bool has(const Reading& r, MeterCounter c) { return r.valid & (1u << static_cast<int>(c)); }
uint64_t raw(const Reading& r, MeterCounter c) { return r.raw[static_cast<int>(c)]; }

TEST(MeterNvmlSource, SumsNvlinkOverLinksInBytesAndReadsEachGroupApart) {
  g_script = Script{};
  g_script.values[{kFieldPcieTx, 0}] = 4000000000u;
  g_script.values[{kFieldPcieRx, 0}] = 17;
  for (unsigned link : {0u, 1u, 5u}) {
    g_script.values[{kFieldNvlinkTx, link}] = 100 + link;  // KiB
    g_script.values[{kFieldNvlinkRx, link}] = 7;
  }
  nvml::Api api = stubApi();
  NvmlCounterReader reader(&api, nullptr, {0, 1, 5}, false, /*links_per_call=*/0);
  EXPECT_EQ(reader.supported(), 0x0fu) << "PCIe and NVLink data; raw not asked for";
  EXPECT_EQ(reader.nvlinkLinks(), 3);
  EXPECT_EQ(reader.widthBits(MeterCounter::kPcieTx), 32);
  EXPECT_EQ(reader.widthBits(MeterCounter::kNvlinkTx), 64);
  int before = g_script.calls;
  Reading r;
  ASSERT_TRUE(reader.read(MeterGroup::kPcie, &r));
  EXPECT_EQ(g_script.calls, before + 1) << "one NVML call per PCIe read";
  EXPECT_EQ(g_script.last_count, 2) << "PCIe fields only: NVLink's cost stays out of the PCIe read";
  EXPECT_EQ(raw(r, MeterCounter::kPcieTx), 4000000000u);
  EXPECT_EQ(raw(r, MeterCounter::kPcieRx), 17u);
  EXPECT_FALSE(has(r, MeterCounter::kNvlinkTx));
  EXPECT_FALSE(has(r, MeterCounter::kNvlinkRx));
  before = g_script.calls;
  Reading n;
  ASSERT_TRUE(reader.read(MeterGroup::kNvlink, &n));
  EXPECT_EQ(g_script.calls, before + 1) << "links_per_call 0: every link in one call";
  EXPECT_EQ(g_script.last_count, 3 * 2);
  EXPECT_FALSE(has(n, MeterCounter::kPcieTx));
  EXPECT_EQ(raw(n, MeterCounter::kNvlinkTx), (100u + 101 + 105) * 1024);
  EXPECT_EQ(raw(n, MeterCounter::kNvlinkRx), 3u * 7 * 1024);
  EXPECT_FALSE(has(n, MeterCounter::kNvlinkRawTx));
  for (const Reading* x : {&r, &n}) {
    EXPECT_LE(x->t_before_ns, x->t_after_ns);
    for (int c = 0; c < 4; ++c) {
      if (!(x->valid & (1u << c))) continue;
      EXPECT_GE(x->t_ns[c], x->t_before_ns);
      EXPECT_LE(x->t_ns[c], x->t_after_ns);
    }
  }
}

TEST(MeterNvmlSource, NvlinkReadSplitsIntoCallsOfWholeLinks) {
  g_script = Script{};
  for (unsigned link = 0; link < 5; ++link) {
    g_script.values[{kFieldNvlinkTx, link}] = 1;
    g_script.values[{kFieldNvlinkRx, link}] = 2;
    g_script.values[{kFieldNvlinkRawTx, link}] = 3;
    g_script.values[{kFieldNvlinkRawRx, link}] = 4;
  }
  nvml::Api api = stubApi();
  NvmlCounterReader reader(&api, nullptr, {0, 1, 2, 3, 4}, true, /*links_per_call=*/2);
  EXPECT_EQ(reader.fieldsPerCall(MeterGroup::kNvlink), 2 * 4) << "4 counters per link, 2 links per call";
  const int before = g_script.calls;
  Reading r;
  ASSERT_TRUE(reader.read(MeterGroup::kNvlink, &r));
  EXPECT_EQ(g_script.calls, before + 3) << "5 links, 2 per call";
  EXPECT_EQ(g_script.last_count, 4) << "the last call takes the one link left";
  EXPECT_EQ(raw(r, MeterCounter::kNvlinkTx), 5u * 1 * 1024);
  EXPECT_EQ(raw(r, MeterCounter::kNvlinkRawRx), 5u * 4 * 1024);
  // One failed call (a link's fields) invalidates the counters it fed, for that read only.
  g_script.whole_call_fails = true;
  ASSERT_FALSE(reader.read(MeterGroup::kNvlink, &r));
  g_script.whole_call_fails = false;
  ASSERT_TRUE(reader.read(MeterGroup::kNvlink, &r));
  EXPECT_EQ(r.valid, 0x3cu);
}

TEST(MeterNvmlSource, FieldsThatFailTheProbeAreNAAndNotReadAgain) {
  g_script = Script{};
  g_script.unsupported_fields = {kFieldNvlinkTx, kFieldNvlinkRx};  // a GeForce card
  nvml::Api api = stubApi();
  NvmlCounterReader reader(&api, nullptr, {0, 1}, true);
  EXPECT_EQ(reader.supported(), 0x33u) << "PCIe and raw NVLink only";
  EXPECT_EQ(reader.nvlinkLinks(), 0);
  Reading r;
  ASSERT_TRUE(reader.read(MeterGroup::kPcie, &r));
  EXPECT_TRUE(has(r, MeterCounter::kPcieTx));
  ASSERT_TRUE(reader.read(MeterGroup::kNvlink, &r));
  EXPECT_FALSE(has(r, MeterCounter::kNvlinkTx));
  EXPECT_TRUE(has(r, MeterCounter::kNvlinkRawRx));
  EXPECT_EQ(g_script.last_count, 2 * 2) << "raw TX/RX of 2 links; the data fields are dropped";
}

TEST(MeterNvmlSource, NoLinksMeansNvlinkNA) {
  g_script = Script{};
  nvml::Api api = stubApi();
  NvmlCounterReader reader(&api, nullptr, {}, false);
  EXPECT_EQ(reader.supported(), 0x03u);
  Reading r;
  EXPECT_FALSE(reader.read(MeterGroup::kNvlink, &r)) << "nothing to read in the NVLink group";
  EXPECT_EQ(r.valid, 0u);
}

TEST(MeterNvmlSource, OneFailedLinkInvalidatesItsCounterForThatReadOnly) {
  g_script = Script{};
  nvml::Api api = stubApi();
  NvmlCounterReader reader(&api, nullptr, {0, 1}, false);
  g_script.fail_once = {kFieldNvlinkRx, 1};
  Reading r;
  ASSERT_TRUE(reader.read(MeterGroup::kNvlink, &r));
  EXPECT_FALSE(has(r, MeterCounter::kNvlinkRx)) << "a partial sum is not a value";
  EXPECT_TRUE(has(r, MeterCounter::kNvlinkTx));
  ASSERT_TRUE(reader.read(MeterGroup::kNvlink, &r));
  EXPECT_TRUE(has(r, MeterCounter::kNvlinkRx));
}

TEST(MeterNvmlSource, AFailedCallIsAFailedRead) {
  g_script = Script{};
  nvml::Api api = stubApi();
  NvmlCounterReader reader(&api, nullptr, {}, false);
  g_script.whole_call_fails = true;
  Reading r;
  EXPECT_FALSE(reader.read(MeterGroup::kPcie, &r));
  EXPECT_EQ(r.valid, 0u);
  ASSERT_NE(r.error, nullptr) << "a failed read says why";
  EXPECT_STREQ(r.error, "Unknown Error");
  EXPECT_GT(r.t_after_ns, 0);
}

TEST(MeterNvmlSource, NvmlTimestampsOutsideTheCallFallBackToTheMidpoint) {
  g_script = Script{};
  g_script.timestamp_us = 1;  // 1970: far outside [before, after]
  nvml::Api api = stubApi();
  NvmlCounterReader reader(&api, nullptr, {}, false);
  Reading r;
  ASSERT_TRUE(reader.read(MeterGroup::kPcie, &r));
  EXPECT_EQ(r.nvml_timestamp_us, 1);
  EXPECT_EQ(r.t_ns[0], r.t_before_ns + (r.t_after_ns - r.t_before_ns) / 2);
}

}  // namespace
}  // namespace tpscope::detail
