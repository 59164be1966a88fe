// SPDX-License-Identifier: Apache-2.0
// cli.cc - argument handling shared by all subcommands, and the dispatcher.
#include "cli.h"

#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <new>
#include <stdexcept>

#include "allreduce/wire.h"
#include "common/memory_reserve.h"
#include "common/param.h"
#include "tpscope/tpscope.h"
#include "tpscope/version.h"

namespace tpscope::cli {

namespace {
// What an allocation that failed says (a run folder, a server's answer or a window list larger than the
// memory this process may use): one line and exit 1, never an abort.
constexpr const char* kOutOfMemory =
    "out of memory: the input needs more memory than this process may use; give it more (ulimit) or a smaller input";

}  // namespace

std::vector<int> parseDeviceList(const std::string& text, const std::string& option, bool repeats) {
  std::vector<int> ids;
  if (text.empty()) return ids;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    std::optional<int64_t> v = parseInt(item);
    if (!v || *v < 0 || *v > 1023 || item.find_first_not_of("0123456789") != std::string::npos)
      throw UsageError("bad GPU index '" + item + "' in " + option + ": give GPU indices like 0,1");
    for (int seen : ids)
      if (seen == *v && !repeats) throw UsageError("GPU index " + item + " appears twice in " + option);
    ids.push_back(static_cast<int>(*v));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return ids;
}

int fail(int code, const std::string& message) {
  std::fprintf(stderr, "tpscope: error: %s\n", message.c_str());
  return code;
}

bool fakeMeterGpus() {
  static const bool fake = [] {
    const char* v = std::getenv("TPSCOPE_METER_FAKE");
    return v != nullptr && std::string(v) == "1";
  }();
  return fake;
}

std::vector<std::string> processArgv() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> argv;
  for (std::string arg; std::getline(f, arg, '\0');) argv.push_back(arg);
  return argv;
}

std::string wireLabel(tpsWire_t wire, float budget) {
  if (wire == tpsWireAuto) return fmt::format("auto:{}", budget);  // a float prints as given: auto:0.01
  if (wire < tpsWireExact || wire > tpsWireAuto) return "unknown";
  return detail::wireName(static_cast<detail::WireCode>(wire));
}

nlohmann::json communicatorJson(const std::optional<tpsConfig_t>& c) {
  if (!c) return nullptr;
  return {{"backend", tpsBackendName(c->backend)},           {"host_copy_threshold", c->host_copy_threshold},
          {"host_chunk_bytes", c->host_chunk_bytes},         {"host_blocks", c->host_blocks},
          {"spin_timeout_ms", c->spin_timeout_ms},           {"shared_devices", c->shared_devices != 0},
          {"p2p_ll_max_bytes", TPS_P2P_LL_MAX_BYTES},        {"fused_max_rows", TPS_FUSED_MAX_ROWS},
          {"wire", wireLabel(c->wire, c->wire_error_budget)}};
}

int runCli(int argc, char** argv) {
  holdMemoryReserve();  // running out of memory is then one line and exit 1 (common/memory_reserve.h)
  CLI::App app{"tpscope: tensor-parallel AllReduce and interconnect measurement for the GPUs of one host", "tpscope"};
  app.set_version_flag("-V,--version",
                       std::string("tpscope ") + TPSCOPE_VERSION_STRING + " (" + tpsGetGitRevision() + ")");
  app.require_subcommand(1);
  app.fallthrough(false);
  std::vector<std::unique_ptr<Command>> commands = registerCommands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    if (what.empty()) what = "bad arguments";
    return fail(kExitUsage, what + " (see 'tpscope --help')");
  } catch (const UsageError& e) {
    return fail(kExitUsage, e.what());
  }
  for (auto& c : commands) {
    if (!c->subcommand()->parsed()) continue;
    try {
      return c->run();
    } catch (const UsageError& e) {
      return fail(kExitUsage, e.what());
    } catch (const std::bad_alloc&) {
      return fail(kExitRuntime, kOutOfMemory);
    } catch (const std::length_error&) {  // a size past what can be allocated at all
      return fail(kExitRuntime, kOutOfMemory);
    } catch (const std::exception& e) {
      return fail(kExitRuntime, e.what());
    }
  }
  return fail(kExitUsage, "no subcommand given (see 'tpscope --help')");
}

}  // namespace tpscope::cli
