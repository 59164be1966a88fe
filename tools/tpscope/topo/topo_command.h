// SPDX-License-Identifier: Apache-2.0
// topo/topo_command.h - `tpscope topo`: devices, links, P2P matrix, ceilings, and which AllReduce paths work and why.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "allreduce/auto_table.h"
#include "allreduce/media.h"
#include "cli.h"
#include "topology/topology.h"

namespace tpscope::cli {

std::unique_ptr<Command> makeTopoCommand(CLI::App& app);

// The table printed by `tpscope topo` (one screen). `nccl_version` is empty when NCCL is missing; `autos`
// is what `auto` picks per size class (allreduce/media.h: autoPicks()).
std::string formatTopologyTable(const Topology& topo, const std::vector<MediumStatus>& media,
                                const std::string& nccl_version, const AutoSummary& autos);
// What `auto` picks per size (autoPicks) as a communicator with a default configuration would: the auto
// table `load` and `host_copy_threshold` choose the backend and path; the wire each size asks for follows
// TPSCOPE_WIRE's value `wire_env` (null or empty: exact): a named wire at every size, or auto:BUDGET with
// the "wires" table of the tune file document `tune` (read from `tune_path`) where it was measured on this
// box, else exact with the note saying why. A value a communicator refuses is the note, the picks exact.
AutoSummary autoSummaryWith(const Topology& topo, const std::vector<MediumStatus>& media,
                            const detail::AutoTableLoad& load, size_t host_copy_threshold, const char* wire_env,
                            const nlohmann::json& tune, const std::string& tune_path);
// The JSON document printed by `tpscope topo --format json`: allreduce/media.h's topologyDocument (what
// a run record keeps) and what `auto` picks, under "allreduce_auto".
nlohmann::json topologyDocument(const Topology& topo, const std::vector<MediumStatus>& media,
                                const std::string& nccl_version, const AutoSummary& autos);

}  // namespace tpscope::cli
