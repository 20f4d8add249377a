// Checked reads of state-dict JSON (optim/json_fields.h).
#include "optim/json_fields.h"

#include <cmath>

#include "core/error.h"

namespace ember::optim::detail {

const nlohmann::json& field(const nlohmann::json& object, std::string_view key, std::string_view where) {
  EMBER_CHECK(object.is_object(), "{}: expected a JSON object, got {}", where, object.dump());
  auto found = object.find(key);
  EMBER_CHECK(found != object.end(), "{} has no '{}'", where, key);
  return *found;
}

double number_field(const nlohmann::json& object, std::string_view key, std::string_view where) {
  const nlohmann::json& value = field(object, key, where);
  EMBER_CHECK(value.is_number(), "{}: '{}' must be a number, got {}", where, key, value.dump());
  const double number = value.get<double>();
  EMBER_CHECK(std::isfinite(number), "{}: '{}' must be finite, got {}", where, key, number);
  return number;
}

double non_negative_field(const nlohmann::json& object, std::string_view key, std::string_view where) {
  const double number = number_field(object, key, where);
  EMBER_CHECK(number >= 0, "{}: '{}' must not be negative, got {}", where, key, number);
  return number;
}

int64_t count_field(const nlohmann::json& object, std::string_view key, std::string_view where, int64_t minimum) {
  const int64_t count = integer_field(object, key, where);
  EMBER_CHECK(count >= minimum, "{}: '{}' must be at least {}, got {}", where, key, minimum, count);
  return count;
}

int64_t integer_field(const nlohmann::json& object, std::string_view key, std::string_view where) {
  const nlohmann::json& value = field(object, key, where);
  EMBER_CHECK(value.is_number(), "{}: '{}' must be a whole number, got {}", where, key, value.dump());
  if (!value.is_number_float()) return value.get<int64_t>();
  // PyTorch writes some counts (a step) as floats: accept whole ones in int64's range.
  const double number = value.get<double>();
  EMBER_CHECK(std::floor(number) == number && std::abs(number) < 9.2e18, "{}: '{}' must be a whole number, got {}",
              where, key, value.dump());
  return int64_t(number);
}

bool bool_field(const nlohmann::json& object, std::string_view key, std::string_view where) {
  const nlohmann::json& value = field(object, key, where);
  EMBER_CHECK(value.is_boolean(), "{}: '{}' must be true or false, got {}", where, key, value.dump());
  return value.get<bool>();
}

std::vector<double> number_list_field(const nlohmann::json& object, std::string_view key, std::string_view where,
                                      int64_t expected_size) {
  const nlohmann::json& value = field(object, key, where);
  EMBER_CHECK(value.is_array(), "{}: '{}' must be a list, got {}", where, key, value.dump());
  EMBER_CHECK(expected_size < 0 || int64_t(value.size()) == expected_size, "{}: '{}' must have {} values, got {}",
              where, key, expected_size, value.size());
  std::vector<double> numbers;
  for (const nlohmann::json& element : value) {
    EMBER_CHECK(element.is_number(), "{}: '{}' must hold numbers, got {}", where, key, value.dump());
    EMBER_CHECK(std::isfinite(element.get<double>()), "{}: '{}' must hold finite numbers, got {}", where, key,
                element.get<double>());
    numbers.push_back(element.get<double>());
  }
  return numbers;
}

}  // namespace ember::optim::detail
