// SPDX-License-Identifier: Apache-2.0
// report_render.h - the report (report.h's buildReport) written out: markdown for people, JSON for tools.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "experiment/report.h"

namespace tpscope::experiment {

std::string formatMarkdown(const Report& r);
nlohmann::json toJson(const Report& r);

}  // namespace tpscope::experiment
