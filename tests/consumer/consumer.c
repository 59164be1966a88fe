/* SPDX-License-Identifier: Apache-2.0
 * A C program against the installed libtpscope: the C API links and answers without a GPU. Prints one
 * line and exits 0 when every answer is the documented one. */
#include <stdio.h>
#include <string.h>

#include <tpscope/tpscope.h>
#include <tpscope/version.h>

static int fails = 0;

static void expect(int ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "consumer_c: %s\n", what);
    ++fails;
  }
}

int main(void) {
  tpsConfig_t config;
  tpsComm_t comm = NULL;
  int devices[1] = {0};

  expect(strcmp(tpsGetVersion(), TPSCOPE_VERSION_STRING) == 0, "tpsGetVersion differs from the installed version.h");
  expect(strcmp(tpsGetErrorString(tpsTimeout), "timeout") == 0, "tpsGetErrorString(tpsTimeout)");
  expect(tpsConfigInit(&config) == tpsSuccess && config.backend == tpsBackendAuto, "tpsConfigInit");
  /* One device is not a communicator: refused before any GPU is touched. */
  expect(tpsCommCreate(&comm, 1, devices, &config) == tpsInvalidArgument && comm == NULL,
         "tpsCommCreate over one device is not tpsInvalidArgument");
  expect(tpsDataTypeSize(tpsBfloat16) == 2, "tpsDataTypeSize(bf16)");
  expect(strcmp(tpsBackendName(tpsBackendP2p), "p2p") == 0, "tpsBackendName(p2p)");
  if (fails) return 1;
  printf("consumer_c: tpscope %s (%s) linked\n", tpsGetVersion(), tpsGetGitRevision());
  return 0;
}
