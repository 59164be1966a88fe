// SPDX-License-Identifier: Apache-2.0
// spec_fuzz.cc - experiment specs (src/experiment/spec.h parseSpec) and what `tpscope arms` computes
// from one before it touches a GPU: effective settings, undeclared differences, availability.
//
// Contract: a spec parses or throws SpecError, nothing else; a parsed spec keeps its text verbatim,
// has arms with unique names that cannot leave the run folder, and every arm's effective settings
// list the same keys in the same order (the difference table and the manifest line them up), with
// values that can be written as JSON.
#include <set>
#include <string>

#include "experiment/guards.h"
#include "experiment/spec.h"
#include "fuzz_util.h"

namespace ex = tpscope::experiment;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  ex::ExperimentSpec spec;
  try {
    spec = ex::parseSpec(text, "fuzz.toml");
  } catch (const ex::SpecError& e) {
    FUZZ_CHECK(!e.message.empty());
    return 0;
  }
  FUZZ_CHECK(spec.text == text);
  FUZZ_CHECK(!spec.arms.empty());
  std::set<std::string> names;
  for (const ex::ArmSpec& a : spec.arms) {
    FUZZ_CHECK(!a.name.empty() && a.name.find('/') == std::string::npos && a.name != "." && a.name != "..");
    FUZZ_CHECK(names.insert(a.name).second);
  }

  const std::vector<ex::EffectiveSettings> arms = ex::effectiveSettings(spec);
  FUZZ_CHECK(arms.size() == spec.arms.size());
  for (const ex::EffectiveSettings& a : arms) {
    FUZZ_CHECK(a.settings.size() == arms[0].settings.size());
    for (size_t i = 0; i < a.settings.size(); ++i) {
      FUZZ_CHECK(a.settings[i].key == arms[0].settings[i].key);
      FUZZ_CHECK(tpscope::fuzz::dumpsAsJson(a.settings[i].value));
    }
    (void)a.devices();
  }
  (void)ex::formatDifferences(ex::undeclaredDifferences(arms));
  ex::Availability box;
  box.gpu_count = 8;
  box.backends = {tpsBackendHost, tpsBackendP2p, tpsBackendNccl};
  box.split_modes = {"none", "layer", "tensor"};
  (void)ex::checkAvailability(arms, box);
  return 0;
}
