// Devices: "cpu" and "cuda:N". The device type indexes the dispatch table from
// day one, so a backend is a new column, not a new code path.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace ember {

enum class DeviceType : uint8_t { cpu, cuda };
inline constexpr int kNumDeviceTypes = 2;

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  Device() = default;
  Device(DeviceType t, int i = 0) : type(t), index(i) {}  // NOLINT: Device(DeviceType::cpu) reads well
  explicit Device(std::string_view spec);                  // "cpu", "cuda", "cuda:1"

  bool is_cpu() const { return type == DeviceType::cpu; }
  bool is_cuda() const { return type == DeviceType::cuda; }
  std::string str() const;
  friend bool operator==(const Device&, const Device&) = default;
};

inline const Device kCPU{DeviceType::cpu, 0};

}  // namespace ember

template <>
struct fmt::formatter<ember::Device> : fmt::formatter<std::string_view> {
  auto format(const ember::Device& d, format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(d.str(), ctx);
  }
};
