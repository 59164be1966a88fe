// SPDX-License-Identifier: Apache-2.0
// server_answers_fuzz.cc - everything a llama-server arm reads from its server
// (src/experiment/server_phases.h): /props and /v1/models, the startup log, /metrics before and after a
// request and the request's stream, through what prepare() and runPhases() make of them.
//
// Input: a byte choosing the arm (split, allreduce, draft), then props, models, log, metrics before,
// metrics after and the stream, separated by NUL bytes. Contract: bodies that are not JSON are an
// error, never a throw; prepare's decisions name the server's settings in values that can be written as
// JSON (the manifest holds them); a repetition gives one window
// per phase whose edges are in order, with counts that are not negative.
#include <string>

#include "engine/llama_server.h"
#include "experiment/server_phases.h"
#include "fuzz_util.h"

namespace en = tpscope::engine;
namespace ex = tpscope::experiment;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t pick = data[0];
  std::vector<std::string> in = tpscope::fuzz::sections(data + 1, size - 1, 6);
  in.resize(6);

  ex::EffectiveSettings arm;
  arm.arm = "A";
  static const char* kSplits[] = {"none", "layer", "tensor", "row"};
  static const char* kAllReduce[] = {"default", "internal", "nccl", "tpscope"};
  for (const ex::Setting& s : std::vector<ex::Setting>{{"devices", (pick & 1) ? "0,1" : "0"},
                                                       {"split", kSplits[(pick >> 1) & 3]},
                                                       {"allreduce", kAllReduce[(pick >> 3) & 3]},
                                                       {"tpscope_backend", "auto"},
                                                       {"draft", (pick & 0x20) ? "self" : "none"},
                                                       {"spec_type", (pick & 0x40) ? "ngram-simple" : "none"},
                                                       {"draft_max", "default"},
                                                       {"prompt_tokens", "64"},
                                                       {"decode_tokens", "16"}})
    arm.set(s);
  ex::ServerLaunch launch;
  launch.args = {"-m", "model.gguf", "-sm", arm.value("split")};

  nlohmann::json props;
  std::string why;
  if (en::propsFromBodies(in[0], (pick & 0x80) ? std::nullopt : std::optional<std::string>(in[1]), &props, &why)) {
    std::vector<ex::Setting> decisions;
    int64_t vocab = 0;
    std::string reason;
    const tpsResult_t r = ex::serverDecisions(arm, launch, props, in[2], &decisions, &vocab, &reason);
    FUZZ_CHECK(r == tpsSuccess || !reason.empty());
    if (r == tpsSuccess) FUZZ_CHECK(!decisions.empty() && decisions.front().key == "server_slot_n_ctx");
    for (const ex::Setting& d : decisions) FUZZ_CHECK(tpscope::fuzz::dumpsAsJson(d.value));
  } else {
    FUZZ_CHECK(!why.empty());
  }

  int64_t t = 100;
  en::CompletionStream stream([&t] { return ++t; });
  stream.feed(in[5]);
  en::Completion c = stream.completion();
  c.sent_ns = 100;
  std::vector<ex::PhaseOutcome> phases;
  std::string reason;
  FUZZ_CHECK(ex::phasesFromRequest(arm, {"prefill", "decode"}, c, en::parsePrometheus(in[3]),
                                   en::parsePrometheus(in[4]), &phases, &reason) == tpsSuccess);
  FUZZ_CHECK(phases.size() == 2);
  for (const ex::PhaseOutcome& p : phases) FUZZ_CHECK(p.steps >= 0 && p.tokens >= 0);
  if (c.token_events > 0) FUZZ_CHECK(phases[0].start_ns <= phases[0].end_ns && phases[1].start_ns <= phases[1].end_ns);
  return 0;
}
