// SPDX-License-Identifier: Apache-2.0
// meter/meter_wrapped.cc - `tpscope meter [options] -- CMD ARGS`: runs CMD with TPSCOPE_METER_PIPE naming a
// FIFO; CMD marks windows by writing `begin NAME` / `end NAME` lines to it (src/meter/control.h). When
// CMD exits, tpscope prints one row per window, GPU and counter and returns CMD's exit code.
//
// Signals: a terminal's Ctrl-C reaches CMD too (same process group), so tpscope only forwards a signal
// that was sent to it alone (meter_command.cc); a second one kills CMD. Either way the summary is printed.
#include <signal.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/utf8.h"
#include "engine/process.h"
#include "meter/control.h"
#include "meter/meter_command.h"
#include "meter/meter_signals.h"

namespace tpscope::cli {

namespace {

void warn(const std::string& message) { std::fprintf(stderr, "tpscope: warning: %s\n", message.c_str()); }

}  // namespace

int runWrapped(Meter& meter, const MeterArgs& args) {
  MeterSummary summary;
  summary.command = args.command;
  if (args.quiesce_ms > 0) {
    QuiesceOptions q;
    q.idle_ms = args.quiesce_ms;
    q.threshold_mbps = args.quiesce_mbps;
    QuiesceRecord rec;
    if (meter.quiesce(q, &rec) == tpsSuccess && !rec.passed) warn("quiescing failed: " + rec.reason);
  }
  // The protocol's own book: windows take the time their line was read, then go to the meter whole.
  detail::WindowBook book;
  detail::ControlPipe pipe;
  std::string error;
  const bool piped = pipe.open(
      [&](const std::string& line, int64_t t) {
        detail::ControlLine cl = detail::parseControlLine(line);
        std::optional<std::string> err;
        detail::ClosedWindow w;
        if (cl.kind == detail::ControlLine::Kind::kMalformed) err = cl.error;
        if (cl.kind == detail::ControlLine::Kind::kBegin) err = book.begin(cl.name, t);
        if (cl.kind != detail::ControlLine::Kind::kMalformed) meter.readNow();  // read the edge at once
        if (cl.kind == detail::ControlLine::Kind::kEnd) {
          err = book.end(cl.name, t, &w);
          if (!err) meter.addWindow(w.name, w.start_ns, w.end_ns);
        }
        // The line is the command's bytes: shown with its control characters escaped, never sent to
        // the terminal as they came (an escape sequence would act on it).
        if (err) warn(printable("control pipe: " + *err + " (line '" + line.substr(0, 80) + "')") + "; ignored");
      },
      &error);
  engine::SpawnOptions sp;
  sp.argv = args.command;
  sp.inherit_stdio = true;     // CMD is on tpscope's terminal
  sp.die_with_parent = false;  // and outlives it, as a command run by a shell does
  if (piped)
    sp.env.emplace_back("TPSCOPE_METER_PIPE", pipe.path());
  else
    warn(error + "; the command runs without window marks");

  const int64_t t_start = Meter::now();
  meter.readNow();  // the command window's start, read at once
  // Interrupted while quiescing: the user wants out, so CMD does not start.
  const bool run_cmd = meterInterrupts() == 0;
  std::unique_ptr<engine::ChildProcess> child;
  std::string spawn_error;
  int spawn_err = ECANCELED;
  const bool started = run_cmd && engine::ChildProcess::spawn(sp, &child, &spawn_error, &spawn_err);
  int code = 0;
  if (!run_cmd) {
    code = 128 + SIGINT;
  } else if (!started) {
    fail(kExitRuntime, "cannot run '" + args.command[0] + "': " + std::strerror(spawn_err));
    code = spawn_err == ENOENT ? 127 : 126;  // what shells return for "not found" / "cannot execute"
  } else {
    setMeterChild(child->pid());
    int seen = 0;
    while (!child->wait()) {                                                // false: a signal interrupted the wait
      if (meterInterrupts() >= 2 && seen < 2) kill(child->pid(), SIGKILL);  // a second interrupt: stop for real
      seen = meterInterrupts();
    }
    setMeterChild(0);
    code = child->exitCode();
    summary.exit_code = code;
  }
  const int64_t t_end = Meter::now();
  meter.readNow();
  pipe.close();  // reads what CMD wrote last
  for (const detail::ClosedWindow& w : book.closeAll(t_end)) {
    warn("window '" + w.name + "' was still open when the command ended; closed at its exit");
    meter.addWindow(w.name, w.start_ns, w.end_ns);
  }
  if (started) meter.addWindow("command", t_start, t_end);
  meter.stop();
  summary.interrupted = meterInterrupts() > 0;
  summary.gpus = meter.gpus();
  summary.options = meter.options();
  summary.windows = meter.windows();
  summary.cadence = meter.cadence();
  summary.quiesce = meter.quiesceRecords();
  summary.calibration = meter.calibration();
  summary.own_mbps = meter.ownMBps();
  summary.sources = meter.sourceStatus();
  if (args.format == "json")
    writeSummaryJson(summary, stdout);
  else if (args.format == "csv")
    std::fputs(summaryCsv(summary).c_str(), stdout);
  else
    std::fputs(summaryTable(summary).c_str(), stdout);
  std::fflush(stdout);
  return code;
}

}  // namespace tpscope::cli
