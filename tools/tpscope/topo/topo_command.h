// SPDX-License-Identifier: Apache-2.0
// topo/topo_command.h - `tpscope topo`: devices, links, P2P matrix, ceilings, and which AllReduce paths work and why.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "allreduce/media.h"
#include "cli.h"
#include "topology/topology.h"

namespace tpscope::cli {

std::unique_ptr<Command> makeTopoCommand(CLI::App& app);

// The table printed by `tpscope topo` (one screen). `nccl_version` is empty when NCCL is missing; `autos`
// is what `auto` picks per size class (allreduce/media.h: autoPicks()).
std::string formatTopologyTable(const Topology& topo, const std::vector<MediumStatus>& media,
                                const std::string& nccl_version, const AutoSummary& autos);
// The JSON document printed by `tpscope topo --format json`: allreduce/media.h's topologyDocument (what
// a run record keeps) and what `auto` picks, under "allreduce_auto".
nlohmann::json topologyDocument(const Topology& topo, const std::vector<MediumStatus>& media,
                                const std::string& nccl_version, const AutoSummary& autos);

}  // namespace tpscope::cli
