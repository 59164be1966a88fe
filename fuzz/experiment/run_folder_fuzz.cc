// SPDX-License-Identifier: Apache-2.0
// run_folder_fuzz.cc - a run folder as `tpscope report RUN_DIR` reads and renders it
// (src/experiment/run_folder.h parseRun, src/experiment/report_render.h).
//
// Input: manifest.json, results.jsonl, samples.jsonl and recording.txt, separated by NUL bytes (a file
// whose section is missing is absent). Contract: the folder parses or throws RecordError, nothing else;
// a parsed one renders as markdown and JSON; every record written back as JSON reads back to the
// same JSON (the writer and the reader agree on every field).
#include <string>

#include "experiment/report_render.h"
#include "experiment/run_folder.h"
#include "fuzz_util.h"

namespace ex = tpscope::experiment;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<std::string> files = tpscope::fuzz::sections(data, size, 4);
  auto file = [&](size_t i) { return i < files.size() ? std::optional<std::string>(files[i]) : std::nullopt; };
  ex::RunRecord run;
  try {
    run = ex::parseRun("RUN_DIR", files[0], file(1), file(2), file(3));
  } catch (const ex::RecordError& e) {
    const std::string what = e.what();
    FUZZ_CHECK(what.find("manifest.json") != std::string::npos || what.find(".jsonl") != std::string::npos);
    return 0;
  }

  const nlohmann::json m = ex::toJson(run.manifest);
  FUZZ_CHECK(ex::toJson(ex::manifestFromJson(m)) == m);
  for (const ex::RepetitionResult& r : run.repetitions) {
    const nlohmann::json j = ex::toJson(r);
    FUZZ_CHECK(ex::toJson(ex::repetitionFromJson(j)) == j);
  }
  for (const ex::SampleRow& s : run.samples) {
    const nlohmann::json j = ex::toJson(s);
    FUZZ_CHECK(ex::toJson(ex::sampleFromJson(j)) == j);
  }

  const ex::Report report = ex::buildReport(run);
  (void)ex::formatMarkdown(report);
  (void)ex::toJson(report).dump(2);
  return 0;
}
