// SPDX-License-Identifier: Apache-2.0
// meter_serve_test - `tpscope meter --serve`'s address parsing and the text format's escaping and
// numbers. The endpoint itself, scraped by a real Prometheus, is tests/prometheus/meter_serve_test.py.
#include "meter/meter_serve.h"

#include <gtest/gtest.h>

#include "meter/exposition.h"

namespace {

using tpscope::cli::parseServeAddress;
using tpscope::detail::MetricsText;

TEST(MeterServe, AddressDefaultsToLoopbackAndTakesNamedHosts) {
  std::string error;
  auto a = parseServeAddress("9400", &error);
  ASSERT_TRUE(a) << error;
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 9400);
  a = parseServeAddress("0.0.0.0:9401", &error);
  ASSERT_TRUE(a) << error;
  EXPECT_EQ(a->host, "0.0.0.0");
  EXPECT_EQ(a->port, 9401);
  a = parseServeAddress("[::1]:0", &error);
  ASSERT_TRUE(a) << error;
  EXPECT_EQ(a->host, "::1");
  EXPECT_EQ(a->port, 0);
}

TEST(MeterServe, BadAddressesSayWhy) {
  for (const char* bad : {"", "65536", "99999999", "-1", "host:", ":9400", "::1:9400", "[::1]9400", "[::1", "a:b"}) {
    std::string error;
    EXPECT_FALSE(parseServeAddress(bad, &error)) << bad;
    EXPECT_NE(error.find("--serve"), std::string::npos) << bad << ": " << error;
  }
}

TEST(MeterServe, TextEscapesLabelValuesAndHelp) {
  MetricsText m;
  m.family("x_total", "counter", "line one\nback\\slash");
  m.sample({{"name", "a \"b\" \\ c\nd"}}, uint64_t{18446744073709551615u});
  m.sample({}, 0.25);
  EXPECT_EQ(m.text(),
            "# HELP x_total line one\\nback\\\\slash\n# TYPE x_total counter\n"
            "x_total{name=\"a \\\"b\\\" \\\\ c\\nd\"} 18446744073709551615\nx_total 0.25\n");
}

TEST(MeterServe, NonFiniteValuesUseTheFormatsWords) {
  MetricsText m;
  m.family("g", "gauge", "h");
  m.sample({}, std::numeric_limits<double>::quiet_NaN());
  m.sample({}, std::numeric_limits<double>::infinity());
  m.sample({}, -std::numeric_limits<double>::infinity());
  EXPECT_EQ(m.text(), "# HELP g h\n# TYPE g gauge\ng NaN\ng +Inf\ng -Inf\n");
}

}  // namespace
