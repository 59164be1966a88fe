// SPDX-License-Identifier: Apache-2.0
// tp/tp_command.h - `tpscope tp`: the synthetic tensor-parallel transformer, prefill and decode, in one split mode.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli.h"
#include "workload/model_config.h"
#include "workload/phases.h"

namespace tpscope::cli {

std::unique_ptr<Command> makeTpCommand(CLI::App& app);

// Every option after parsing and validation (the JSON "context" echoes it).
struct TpOptions {
  workload::ModelConfig config;
  workload::SplitMode split = workload::SplitMode::kNone;
  std::vector<int> devices;
  std::string backend = "auto";
  // auto | cudnn | kernel; after the model is built, what auto resolved to (workload::PrefillAttention).
  std::string prefill_attention = "auto";
  // The decode kernel choices (workload::DecodeKernels): pushed | fused | plain, attention | kernel, and
  // auto | on | off; after the model is built, attention_pdl is what auto resolved to.
  std::string reduction = "pushed";
  std::string rope_kernel = "attention";
  std::string attention_pdl = "auto";
  // Split tensor, once the model is built: its communicator's resolved configuration (tpsCommGetConfig).
  std::optional<tpsConfig_t> communicator;
  std::string phase = "both";
  workload::PrefillOptions prefill;
  workload::DecodeOptions decode;
  uint64_t seed = 1;
  std::string format = "table";
};

// The KV capacity and the largest forward a run with these options needs.
workload::RunShape runShape(const TpOptions& o);

// Table and JSON output. `estimate` holds one entry per GPU position.
std::string formatTpTable(const TpOptions& o, const std::vector<workload::GpuMemory>& estimate,
                          const std::vector<workload::PhaseResult>& results);
nlohmann::json tpDocument(const TpOptions& o, const std::vector<workload::GpuMemory>& estimate,
                          const std::vector<workload::PhaseResult>& results, const std::vector<std::string>& argv);

}  // namespace tpscope::cli
