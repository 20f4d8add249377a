// Printing tensors the way PyTorch does: tensor([[1., 2.], [3., 4.]]) with
// aligned columns, four decimals when needed, and "..." past 1000 elements.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/ops/views.h"
#include "core/tensor.h"

namespace ember {
namespace {

constexpr int64_t kSummaryThreshold = 1000;
constexpr int64_t kEdgeItems = 3;

struct Printer {
  const std::vector<double>& values;
  // The exact values of an integer or bool tensor: through doubles, int64
  // values past 2^53 printed rounded, and INT64_MAX as INT64_MIN.
  const std::vector<int64_t>& integers;
  const Shape& shape;
  DType dtype;
  bool summarize = false;
  bool integer_valued = true;  // every finite value is a whole number
  bool scientific = false;
  size_t width = 0;
  std::string out;

  std::string element(size_t index) const {
    if (dtype == DType::boolean) return integers[index] != 0 ? "True" : "False";
    if (!is_floating(dtype)) return fmt::format("{}", integers[index]);
    const double v = values[index];
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    if (scientific) return fmt::format("{:.4e}", v);
    if (integer_valued) return fmt::format("{:.0f}.", v);
    return fmt::format("{:.4f}", v);
  }

  // PyTorch's choice (torch/_tensor_str.py): scientific when the nonzero
  // finite magnitudes span more than 1000x or pass 1e8, or, for values that
  // are not all whole, go under 1e-4.
  void measure() {
    double max_abs = 0, min_abs = INFINITY;
    for (double v : values) {
      if (!std::isfinite(v)) continue;
      if (v != std::floor(v)) integer_valued = false;
      max_abs = std::max(max_abs, std::abs(v));
      if (v != 0) min_abs = std::min(min_abs, std::abs(v));
    }
    const bool any = std::isfinite(min_abs);
    scientific = is_floating(dtype) && any &&
                 (max_abs / min_abs > 1000 || max_abs > 1e8 || (!integer_valued && min_abs < 1e-4));
    for (size_t i = 0; i < size_t(std::max(values.size(), integers.size())); ++i) width = std::max(width, element(i).size());
  }

  // Prints the sub-tensor at `dim` whose first element is values[base].
  void print(int dim, int64_t base, int indent) {
    if (dim == shape.ndim()) {
      std::string s = element(size_t(base));
      out.append(width - s.size(), ' ').append(s);
      return;
    }
    int64_t size = shape[dim], inner = 1;
    for (int d = dim + 1; d < shape.ndim(); ++d) inner *= shape[d];
    bool innermost = dim + 1 == shape.ndim();
    std::string separator = innermost ? ", " : fmt::format(",{}{:{}}", std::string(size_t(shape.ndim() - dim - 1), '\n'), "", indent + 1);
    out += "[";
    for (int64_t i = 0; i < size; ++i) {
      if (summarize && size > 2 * kEdgeItems && i == kEdgeItems) {
        out.append("...").append(separator);
        i = size - kEdgeItems;
      }
      print(dim + 1, base + i * inner, indent + 1);
      if (i + 1 < size) out += separator;
    }
    out += "]";
  }
};

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  const bool floating = is_floating(dtype());
  const std::vector<double> values = floating ? to_vector<double>() : std::vector<double>();
  const std::vector<int64_t> integers = floating ? std::vector<int64_t>() : to_vector<int64_t>();
  Printer printer{.values = values, .integers = integers, .shape = shape(), .dtype = dtype(), .out = "tensor("};
  printer.summarize = numel() > kSummaryThreshold;
  printer.measure();
  if (numel() == 0)
    printer.out += "[]";  // as PyTorch: one [] and the size, whatever the sizes
  else
    printer.print(0, 0, 7);
  std::string out = std::move(printer.out);
  if (dtype() != DType::f32 && dtype() != DType::i64 && dtype() != DType::boolean) out += fmt::format(", dtype={}", dtype());
  if (!device().is_cpu()) out += fmt::format(", device='{}'", device());
  if (numel() == 0) out += fmt::format(", size={}", shape());
  return out + ")";
}

}  // namespace ember
