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
  const Shape& shape;
  DType dtype;
  bool summarize = false;
  bool integer_valued = true;  // every finite value is a whole number
  bool scientific = false;
  size_t width = 0;
  std::string out;

  std::string element(double v) const {
    if (dtype == DType::boolean) return v != 0 ? "True" : "False";
    if (!is_floating(dtype)) return fmt::format("{}", int64_t(v));
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    if (scientific) return fmt::format("{:.4e}", v);
    if (integer_valued) return fmt::format("{:.0f}.", v);
    return fmt::format("{:.4f}", v);
  }

  void measure() {
    double max_abs = 0, min_abs = INFINITY;
    for (double v : values) {
      if (!std::isfinite(v)) continue;
      if (v != std::floor(v)) integer_valued = false;
      max_abs = std::max(max_abs, std::abs(v));
      if (v != 0) min_abs = std::min(min_abs, std::abs(v));
    }
    scientific = is_floating(dtype) && (max_abs >= 1e8 || (!integer_valued && min_abs < 1e-4));
    for (double v : values) width = std::max(width, element(v).size());
  }

  // Prints the sub-tensor at `dim` whose first element is values[base].
  void print(int dim, int64_t base, int indent) {
    if (dim == shape.ndim()) {
      std::string s = element(values[size_t(base)]);
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
  std::vector<double> values = to_vector<double>();
  Printer printer{.values = values, .shape = shape(), .dtype = dtype(), .out = "tensor("};
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
