// SPDX-License-Identifier: Apache-2.0
// A C++ program against the installed libtpscope.a through the C++ wrapper: links the static library
// with the CUDA runtime and NCCL it needs, and runs without a GPU.
#include <tpscope/version.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <tpscope/tpscope.hpp>

int main() {
  int fails = 0;
  auto expect = [&](bool ok, const char* what) {
    if (!ok) {
      std::fprintf(stderr, "consumer_cxx: %s\n", what);
      ++fails;
    }
  };
  expect(std::string(tpsGetVersion()) == TPSCOPE_VERSION_STRING, "tpsGetVersion differs from the installed version.h");
  tpscope::Communicator comm;
  expect(tpscope::Communicator::create({0}, &comm) == tpsInvalidArgument, "a one-device communicator is not refused");
  expect(!comm, "a refused create left a communicator");
  expect(std::strcmp(tpsDataTypeName(tpsFloat16), "half") == 0, "tpsDataTypeName(tpsFloat16)");
  if (fails) return 1;
  std::printf("consumer_cxx: tpscope %s linked statically\n", tpsGetVersion());
  return 0;
}
