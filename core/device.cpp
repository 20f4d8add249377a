// Parsing and printing devices.
#include "core/device.h"

#include <charconv>

#include "core/error.h"

namespace ember {

Device::Device(std::string_view spec) {
  if (spec == "cpu") return;
  std::string_view rest = spec;
  EMBER_CHECK(rest.starts_with("cuda"), "Device: unknown device '{}' (expected 'cpu', 'cuda' or 'cuda:N')", spec);
  type = DeviceType::cuda;
  rest.remove_prefix(4);
  if (rest.empty()) return;
  EMBER_CHECK(rest.front() == ':' && rest.size() > 1, "Device: malformed device '{}' (expected 'cuda:N')", spec);
  rest.remove_prefix(1);
  auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), index);
  EMBER_CHECK(ec == std::errc() && end == rest.data() + rest.size() && index >= 0,
              "Device: malformed device index in '{}'", spec);
}

std::string Device::str() const { return is_cpu() ? "cpu" : fmt::format("cuda:{}", index); }

}  // namespace ember
