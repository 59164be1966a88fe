/* SPDX-License-Identifier: Apache-2.0
 *
 * config_layout - prints tpsConfig_t's layout as a C compiler of this build lays it out: its size and
 * alignment, and every field's name, offset and size in declaration order, as JSON. The Python binding's
 * test (python/tests/test_binding.py) compares its ctypes struct with it, so a field added to one side
 * only, or laid out otherwise, fails there. A field added to the header and not here fails that test
 * too: it reads the field names from the header itself.
 */
#include <stddef.h>
#include <stdio.h>

#include "tpscope/tpscope.h"

static int fields = 0;

static void field(const char* name, size_t offset, size_t size) {
  printf("%s\n    {\"name\": \"%s\", \"offset\": %zu, \"size\": %zu}", fields++ ? "," : "", name, offset, size);
}

#define FIELD(name) field(#name, offsetof(tpsConfig_t, name), sizeof(((tpsConfig_t*)0)->name))

int main(void) {
  printf("{\"struct\": \"tpsConfig_t\", \"size\": %zu, \"align\": %zu, \"fields\": [", sizeof(tpsConfig_t),
         (size_t) _Alignof(tpsConfig_t));
  FIELD(backend);
  FIELD(host_copy_threshold);
  FIELD(host_chunk_bytes);
  FIELD(host_blocks);
  FIELD(spin_timeout_ms);
  FIELD(shared_devices);
  FIELD(num_peer_uids);
  FIELD(peer_uids);
  FIELD(wire);
  FIELD(wire_error_budget);
  FIELD(reserved);
  printf("\n]}\n");
  return 0;
}
