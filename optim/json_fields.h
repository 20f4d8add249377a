// Reading the fields of a state dict's JSON with errors that say where:
// "Adam.load_state_dict: param_groups[1] has no 'lr'". Used by optimizer.cpp,
// the optimizers' group_from_json and the schedulers' load_state_dict.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>
#include <vector>

namespace ember::optim::detail {

// object[key], which must exist; `where` names the caller and the place.
const nlohmann::json& field(const nlohmann::json& object, std::string_view key, std::string_view where);
// A finite number: no state dict field is NaN or infinite (a learning rate
// of inf would train to NaN).
double number_field(const nlohmann::json& object, std::string_view key, std::string_view where);
// A finite number >= 0 (a learning rate, a decay factor).
double non_negative_field(const nlohmann::json& object, std::string_view key, std::string_view where);
int64_t integer_field(const nlohmann::json& object, std::string_view key, std::string_view where);
// A whole number >= minimum (a step count: 0, or -1 for "before the first").
int64_t count_field(const nlohmann::json& object, std::string_view key, std::string_view where, int64_t minimum);
bool bool_field(const nlohmann::json& object, std::string_view key, std::string_view where);
// A list of finite numbers, with `expected_size` elements unless it is negative.
std::vector<double> number_list_field(const nlohmann::json& object, std::string_view key, std::string_view where,
                                      int64_t expected_size = -1);

}  // namespace ember::optim::detail
