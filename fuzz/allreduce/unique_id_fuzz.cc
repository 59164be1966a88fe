// SPDX-License-Identifier: Apache-2.0
// unique_id_fuzz - parseBootstrapId on arbitrary bytes: the bytes a caller hands tpsCommInitRank as a
// tpsUniqueId (a copy cut short, corrupted, or made up). Whatever it accepts must be an id this build
// made: its magic and version, zero reserved bytes, and a socket name that fits an abstract address.
#include <sys/un.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "allreduce/bootstrap.h"
#include "allreduce/bootstrap_wire.h"

using namespace tpscope::detail;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  BootstrapId id{};
  std::string why;
  // The bytes as they are (any length), then as the 128 bytes of a tpsUniqueId (cut or zero-padded).
  const bool ok = parseBootstrapId(data, size, &id, &why);
  if (ok != (size == sizeof(BootstrapId) && parseBootstrapId(data, size, &id, nullptr))) std::abort();
  if (!ok && why.empty()) std::abort();  // every refusal says why
  tpsUniqueId raw{};
  std::memcpy(&raw, data, size < sizeof(raw) ? size : sizeof(raw));
  why.clear();
  if (parseBootstrapId(raw, &id, &why) != tpsSuccess) {
    if (why.empty()) std::abort();
    return 0;
  }
  if (id.magic != kBootstrapMagic || id.version != kBootstrapVersion) std::abort();
  for (uint8_t b : id.reserved)
    if (b != 0) std::abort();
  const std::string name = socketName(id.socket_tag);
  if (name.size() >= sizeof(sockaddr_un::sun_path) || name[0] != '@') std::abort();
  return 0;
}
