// Parsers for the launcher's environment variables (see environment.h).
#include "distributed/environment.h"

#include <cerrno>
#include <cstdlib>
#include <string>

#include "core/error.h"

namespace ember::distributed {

int64_t parse_env_integer(const char* name, const char* text, int64_t low, int64_t high) {
  errno = 0;
  char* end = nullptr;
  const long long value = std::strtoll(text, &end, 10);
  EMBER_CHECK(*text != '\0' && *end == '\0' && errno == 0, "{}='{}' is not an integer", name, text);
  EMBER_CHECK(value >= low && value <= high, "{}={} is out of range [{}, {}]", name, value, low, high);
  return value;
}

bool parse_env_flag(const char* name, const char* text) {
  const std::string value = text;
  if (value == "1" || value == "true") return true;
  if (value == "0" || value == "false" || value.empty()) return false;
  EMBER_CHECK(false, "{}='{}' is not a flag (use true or false, 1 or 0)", name, text);
  return false;
}

milliseconds parse_env_seconds(const char* name, const char* text) {
  errno = 0;
  char* end = nullptr;
  const double seconds = std::strtod(text, &end);
  EMBER_CHECK(*text != '\0' && *end == '\0' && errno == 0 && seconds > 0 && seconds < kMaxTimeoutSeconds,
              "{}='{}' is not a positive number of seconds below {:g}", name, text, kMaxTimeoutSeconds);
  return milliseconds(int64_t(seconds * 1000));
}

}  // namespace ember::distributed
