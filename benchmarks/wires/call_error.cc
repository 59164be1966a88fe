// SPDX-License-Identifier: Apache-2.0
// call_error - the error each compressed wire adds to a model's own AllReduce calls, on the CPU.
//
//   call_error CAPTURE_DIR [--wires int8,fp8,int4] [--blocks 32,64,128] [--json OUT]
//
// CAPTURE_DIR is what `tpscope tp --logits-out ... --capture-allreduce DIR` wrote (workload/capture.h).
// Every captured call goes through the exact wire and each wire at each block size (values per scale) with
// the library's codec arithmetic (allreduce/wire.h); call_error_stats.h defines the figures. The table goes
// to stdout, the report (call_error_report.h) to --json. Exit 0, 1 when the capture cannot be read, 2 for
// a usage error.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>

#include "call_error_report.h"

int main(int argc, char** argv) {
  using tpscope::wires::ReportOptions;
  CLI::App app{"The error each compressed wire adds to captured AllReduce calls (CPU)"};
  std::string dir, json_path;
  std::vector<std::string> wires = {"int8", "fp8", "int4"};
  ReportOptions o;
  app.add_option("capture", dir, "Capture folder (tpscope tp --capture-allreduce)")->required();
  app.add_option("--wires", wires, "Lossy wires to measure (exact is always measured)")->delimiter(',');
  app.add_option("--blocks", o.blocks, "Values per scale to measure (the library's is 64)")->delimiter(',');
  app.add_option("--json", json_path, "Write the report as JSON to this file");
  CLI11_PARSE(app, argc, argv);
  o.wires.clear();
  for (const std::string& w : wires) {
    const auto code = tpscope::detail::parseWireName(w);
    if (!code || *code == tpscope::detail::WireCode::kExact || *code == tpscope::detail::WireCode::kBf16) {
      std::fprintf(stderr,
                   "call_error: --wires takes int8, fp8 and int4 ('%s' is not one: exact is always measured, and bf16 "
                   "carries float32 calls, not a capture's bfloat16)\n",
                   w.c_str());
      return 2;
    }
    o.wires.push_back(*code);
  }
  for (int b : o.blocks)
    if (b < 1 || b > 4096) {
      std::fprintf(stderr, "call_error: --blocks takes sizes in 1..4096 (got %d)\n", b);
      return 2;
    }
  nlohmann::json report;
  std::string error;
  if (!tpscope::wires::callErrorReport(dir, o, &report, &error)) {
    std::fprintf(stderr, "call_error: %s\n", error.c_str());
    return 1;
  }
  std::fputs(tpscope::wires::formatReport(report).c_str(), stdout);
  if (!json_path.empty()) {
    std::ofstream f(json_path);
    f << report.dump(1) << "\n";
    if (!f.flush()) {
      std::fprintf(stderr, "call_error: cannot write %s\n", json_path.c_str());
      return 1;
    }
  }
  return 0;
}
