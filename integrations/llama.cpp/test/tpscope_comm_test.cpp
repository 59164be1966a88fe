// Runs the integration's translation unit without GPUs, through ggml's log: what it says with one CUDA
// device (at warning level, so llama.cpp's default verbosity shows it), the wire TPSCOPE_WIRE names (exact
// without it), that it says nothing for other GGML_CUDA_ALLREDUCE choices, and that a communicator it
// cannot create is declined with the reason (the caller then runs llama.cpp's own AllReduce). Built and
// run by ../check.
#include "ggml.h"
#include "tpscope-comm.h"

#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

std::string logged;
ggml_log_level worst = GGML_LOG_LEVEL_NONE;
int fails = 0;

void capture(ggml_log_level level, const char * text, void *) {
    logged += text;
    if (level > worst && level != GGML_LOG_LEVEL_CONT) worst = level;
}

void expect(bool ok, const char * what) {
    if (!ok) {
        std::fprintf(stderr, "tpscope_comm_test: %s\nlogged: %s\n", what, logged.c_str());
        ++fails;
    }
}

void reset() {
    logged.clear();
    worst = GGML_LOG_LEVEL_NONE;
}

}  // namespace

int main() {
    ggml_log_set(capture, nullptr);

    setenv("GGML_CUDA_ALLREDUCE", "tpscope", 1);
    ggml_cuda_tpscope_log_devices(1);
    expect(logged.find("GGML_CUDA_ALLREDUCE=tpscope (tpscope ") != std::string::npos &&
               logged.find("1 CUDA device, so no AllReduce runs and llama.cpp computes as it does on one GPU") !=
                   std::string::npos,
           "one device: the log does not say that no AllReduce runs");
    expect(worst == GGML_LOG_LEVEL_WARN, "one device: not said as a warning");

    reset();
    unsetenv("TPSCOPE_WIRE");
    ggml_cuda_tpscope_log_devices(2);
    expect(logged.find("tensor-parallel splits reduce with tpscope") != std::string::npos,
           "two devices: the log does not say that tpscope reduces");
    expect(logged.find(", exact wire)") != std::string::npos, "no TPSCOPE_WIRE: the log does not say exact");

    // TPSCOPE_WIRE passes through to tpscope (the communicator's config leaves the wire at 0 for it).
    reset();
    setenv("TPSCOPE_WIRE", "fp8", 1);
    ggml_cuda_tpscope_log_devices(2);
    expect(logged.find(", TPSCOPE_WIRE=fp8)") != std::string::npos, "TPSCOPE_WIRE=fp8 is not in the log");
    unsetenv("TPSCOPE_WIRE");

    reset();
    setenv("GGML_CUDA_ALLREDUCE", "nccl", 1);
    ggml_cuda_tpscope_log_devices(1);
    expect(logged.empty(), "GGML_CUDA_ALLREDUCE=nccl: tpscope spoke");

    reset();
    const int one[1] = {0};
    expect(ggml_cuda_tpscope_init(one, 1) == nullptr, "a one-device communicator was created");
    expect(logged.find("tpscope AllReduce takes 2 to 8 devices, not 1") != std::string::npos,
           "one device: the reason is not in the log");

    // Two devices: created where two GPUs exist, else declined with tpscope's error.
    reset();
    const int two[2] = {0, 1};
    if (ggml_cuda_tpscope * ctx = ggml_cuda_tpscope_init(two, 2)) {
        expect(logged.find("tpscope AllReduce (tpscope ") != std::string::npos, "created without its log line");
        expect(logged.find(", wire exact) over CUDA devices 0,1") != std::string::npos,
               "created without the wire it took in its log line");
        ggml_cuda_tpscope_free(ctx);
    } else {
        expect(logged.find("tpscope communicator over 2 devices failed (") != std::string::npos,
               "a failed communicator is not explained in the log");
    }

    if (fails == 0) std::printf("tpscope_comm_test: ok\n");
    return fails == 0 ? 0 : 1;
}
