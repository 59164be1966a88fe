// SPDX-License-Identifier: Apache-2.0
// phases.cc - prefill and decode timing, CUDA graph decode, AllReduce counts from tpsCommGetStats.
#include "workload/phases.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "common/checks.h"
#include "meter/meter.h"

namespace tpscope::workload {

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

struct Traffic {
  unsigned long long calls = 0, bytes = 0;
};

Traffic traffic(const Model& m) {
  Traffic t;
  std::vector<PathStats> s;
  if (!m.comm() || allPathStats(m.comm(), &s) != tpsSuccess) return t;
  for (const PathStats& path : s)
    for (const tpsStatsCell_t& c : path.cells) t.calls += c.calls, t.bytes += c.payload_bytes;
  return t;
}

// The library's statistics into r (allreduce_stats, allreduce_ranks).
void keepStats(const Model& m, PhaseResult* r) {
  if (!m.comm() || allPathStats(m.comm(), &r->allreduce_stats) != tpsSuccess) return;
  (void)tpsCommCount(m.comm(), &r->allreduce_ranks);
}

void resetTraffic(const Model& m) {
  if (m.comm()) (void)tpsCommResetStats(m.comm());
}

// Marks the phase window on a meter that wraps this process (`tpscope meter -- tpscope tp ...`):
// `begin NAME` / `end NAME` lines to the FIFO named by TPSCOPE_METER_PIPE, as any wrapped command
// does (src/meter/control.h). Without the variable, nothing.
void pipeMark(const char* verb, const char* name) {
  static const int fd = [] {
    const char* p = std::getenv("TPSCOPE_METER_PIPE");
    return p && *p ? open(p, O_WRONLY | O_NONBLOCK | O_CLOEXEC) : -1;
  }();
  if (fd < 0) return;
  const std::string line = fmt::format("{} {}\n", verb, name);
  (void)!write(fd, line.data(), line.size());
}

tpsResult_t fail(tpsResult_t r, std::string* reason, const std::string& what) {
  if (reason->empty()) *reason = what;
  return r;
}

}  // namespace

double emittedPerStep(const DecodeOptions& o) { return 1.0 + o.accept * (o.tokens_per_step - 1); }

int decodeSteps(const DecodeOptions& o) {
  return std::max(1, static_cast<int>(std::ceil(o.tokens / emittedPerStep(o) - 1e-9)));
}

tpsResult_t runPrefill(Model& model, const PrefillOptions& o, Meter* meter, PhaseResult* out, std::string* reason) {
  PhaseResult r;
  r.phase = "prefill";
  r.steps = (o.prompt + o.ubatch - 1) / o.ubatch;
  r.tokens_per_forward = o.ubatch;
  r.tokens = o.prompt;
  // Warm-up: the whole prefill once, untimed: cuBLAS heuristics, module loading, and cuDNN's attention
  // plan for every micro-batch's key count (built once per shape, as an engine builds them at load).
  if (model.prefill(o.prompt, o.ubatch) != tpsSuccess || model.synchronize() != tpsSuccess)
    return fail(tpsCudaError, reason, "the prefill warm-up failed (see the log)");
  resetTraffic(model);
  if (meter) (void)meter->begin("prefill");
  pipeMark("begin", "prefill");
  const double t0 = now();
  tpsResult_t e = model.prefill(o.prompt, o.ubatch);
  if (e == tpsSuccess) e = model.synchronize();
  const double t1 = now();
  pipeMark("end", "prefill");
  if (meter) (void)meter->end("prefill");
  if (e != tpsSuccess) return fail(e, reason, "prefill failed (see the log)");
  const Traffic t = traffic(model);
  r.allreduce_calls = t.calls, r.allreduce_bytes = t.bytes;
  keepStats(model, &r);
  r.seconds = t1 - t0;
  r.tokens_per_s = o.prompt / r.seconds;
  r.ms_per_step = 1e3 * r.seconds / r.steps;
  *out = r;
  return tpsSuccess;
}

// Runs `steps` decode steps (graph or eager) and returns the seconds from first enqueue to synchronize.
tpsResult_t timeSteps(Model& model, const DecodeOptions& o, int steps, cudaGraphExec_t exec, double* seconds) {
  const double t0 = now();
  tpsResult_t e = tpsSuccess;
  for (int i = 0; i < steps && e == tpsSuccess; ++i)
    e = exec ? model.launch(exec) : model.forward(o.tokens_per_step, o.ctx);
  if (e == tpsSuccess) e = model.synchronize();
  *seconds = now() - t0;
  return e;
}

// The same steps with the AllReduces skipped: what a step costs without its reductions.
tpsResult_t timeWithoutAllReduce(Model& model, const DecodeOptions& o, int steps, bool graph, double* seconds) {
  model.setSkipAllReduce(true);
  cudaGraphExec_t exec = nullptr;
  std::string why;
  tpsResult_t e = graph ? model.captureForward(o.tokens_per_step, o.ctx, &exec, &why) : tpsSuccess;
  if (e == tpsSuccess) e = exec ? model.launch(exec) : model.forward(o.tokens_per_step, o.ctx);  // warm-up
  if (e == tpsSuccess) e = model.synchronize();
  if (e == tpsSuccess) e = timeSteps(model, o, steps, exec, seconds);
  if (exec) (void)cudaGraphExecDestroy(exec);
  model.setSkipAllReduce(false);
  return e;
}

tpsResult_t runDecode(Model& model, const DecodeOptions& o, Meter* meter, PhaseResult* out, std::string* reason) {
  PhaseResult r;
  r.phase = "decode";
  r.steps = decodeSteps(o);
  r.tokens_per_forward = o.tokens_per_step;
  r.tokens = r.steps * emittedPerStep(o);
  // Every step verifies k tokens at positions c .. c+k-1 over the same context, so each step costs
  // the same and the graph is one fixed forward. The cache beyond c is rewritten step after step.
  if (model.fillContext(o.ctx) != tpsSuccess) return fail(tpsCudaError, reason, "filling the KV cache failed");
  if (model.forward(o.tokens_per_step, o.ctx) != tpsSuccess || model.synchronize() != tpsSuccess)
    return fail(tpsCudaError, reason, "the decode warm-up failed (see the log)");
  cudaGraphExec_t exec = nullptr;
  Traffic per_step;
  if (o.graph) {
    resetTraffic(model);
    std::string why;
    if (model.captureForward(o.tokens_per_step, o.ctx, &exec, &why) == tpsSuccess) {
      per_step = traffic(model);  // what the capture enqueued: one step's AllReduces
      keepStats(model, &r);
      r.graph = true;
      if (model.launch(exec) != tpsSuccess || model.synchronize() != tpsSuccess) {
        (void)cudaGraphExecDestroy(exec);
        return fail(tpsCudaError, reason, "the first decode graph launch failed (see the log)");
      }
    } else {
      r.graph_note = why;
      TPS_LOG_INFO("decode runs eagerly: {}", why);
    }
  }
  resetTraffic(model);
  if (meter) (void)meter->begin("decode");
  pipeMark("begin", "decode");
  double seconds = 0;
  tpsResult_t e = timeSteps(model, o, r.steps, exec, &seconds);
  pipeMark("end", "decode");
  if (meter) (void)meter->end("decode");
  if (exec) (void)cudaGraphExecDestroy(exec);
  if (e != tpsSuccess) return fail(e, reason, "decode failed (see the log)");
  if (r.graph) {
    r.allreduce_calls = per_step.calls * r.steps, r.allreduce_bytes = per_step.bytes * r.steps;
    r.stats_scale = r.steps;
  } else {
    const Traffic t = traffic(model);
    r.allreduce_calls = t.calls, r.allreduce_bytes = t.bytes;
    keepStats(model, &r);
  }
  r.seconds = seconds;
  r.tokens_per_s = r.tokens / r.seconds;
  r.ms_per_step = 1e3 * r.seconds / r.steps;
  if (model.comm() && o.allreduce_share) {
    double bare = 0;
    if (timeWithoutAllReduce(model, o, r.steps, r.graph, &bare) != tpsSuccess)
      return fail(tpsCudaError, reason, "decode without AllReduces failed (see the log)");
    r.ms_per_step_without_allreduce = 1e3 * bare / r.steps;
    r.allreduce_share = std::max(0.0, 1.0 - r.ms_per_step_without_allreduce / r.ms_per_step);
  }
  *out = r;
  return tpsSuccess;
}

}  // namespace tpscope::workload
