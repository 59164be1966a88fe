// SPDX-License-Identifier: Apache-2.0
// nvml_loader_test - unit tests for src/nvml/nvml_loader.cc: "not available" is a value with a reason.
#include "nvml/nvml_loader.h"

#include <gtest/gtest.h>

namespace tpscope::nvml {
namespace {

TEST(NvmlLoader, MissingLibraryGivesAReasonNotACrash) {
  Api api;
  void* handle = reinterpret_cast<void*>(1);
  std::string reason;
  EXPECT_FALSE(loadApi("/nonexistent/libnvidia-ml.so.1", &api, &handle, &reason));
  EXPECT_EQ(handle, nullptr);
  EXPECT_NE(reason.find("/nonexistent/libnvidia-ml.so.1"), std::string::npos) << reason;
  EXPECT_NE(reason.find("no NVIDIA driver"), std::string::npos) << reason;
  EXPECT_EQ(api.init, nullptr);
}

TEST(NvmlLoader, ALibraryWithoutNvmlSymbolsIsRejected) {
  Api api;
  void* handle = nullptr;
  std::string reason;
  EXPECT_FALSE(loadApi("libc.so.6", &api, &handle, &reason));
  EXPECT_NE(reason.find("nvmlInit_v2"), std::string::npos) << reason;
  EXPECT_EQ(api.deviceGetFieldValues, nullptr);
}

TEST(NvmlLoader, ProcessWideStateIsConsistent) {
  // Either NVML works (GPU machine) or it does not and says why (CI); never both or neither.
  const Api* api = Nvml::get();
  EXPECT_EQ(api == nullptr, !Nvml::unavailableReason().empty());
  EXPECT_EQ(api == nullptr, Nvml::driverVersion().empty());
  EXPECT_FALSE(Nvml::errorString(NVML_ERROR_NOT_SUPPORTED).empty());
}

}  // namespace
}  // namespace tpscope::nvml
