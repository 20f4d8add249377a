// Tensors from the golden JSON files of tests/data (written by its make_golden_*.py
// scripts with PyTorch): {"shape": [...], "values": [...]}, null for "none".
#pragma once

#include <nlohmann/json.hpp>

#include "core/ops/creation.h"
#include "core/ops/loss.h"
#include "core/tensor.h"

namespace ember::testing {

// f64 (or i64) values; undefined for null. 0-d values stay 0-d.
inline Tensor tensor_from(const nlohmann::json& j, DType dtype = DType::f64) {
  if (j.is_null()) return Tensor();
  Shape shape;
  for (int64_t d : j["shape"]) shape.push_back(d);
  // from_vector reads an empty shape as "1-d": reshape, so 0-d values stay 0-d.
  if (dtype == DType::i64) return from_vector<int64_t>(j["values"].get<std::vector<int64_t>>()).reshape(shape);
  return from_vector<double>(j["values"].get<std::vector<double>>()).reshape(shape).to(dtype);
}

// tensor_from, requiring grad.
inline Tensor leaf_from(const nlohmann::json& j) {
  Tensor t = tensor_from(j);
  if (t.defined()) t.requires_grad_(true);
  return t;
}

// "none", "sum" or "mean" as a Reduction.
inline Reduction reduction_from(const nlohmann::json& j) {
  const std::string name = j.get<std::string>();
  return name == "none" ? Reduction::none : name == "sum" ? Reduction::sum : Reduction::mean;
}

}  // namespace ember::testing
