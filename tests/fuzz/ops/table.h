// The op fuzzer's op table (tests/fuzz/README_ops.md, "Ops"): each entry reads
// its operands and arguments from the program and returns a Call, which
// tests/fuzz/ops.cpp runs twice, with the fast kernels and with the reference
// ones, and compares. Entries: ops/table.cpp.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/ops/program.h"

namespace ember::fuzz {

// How closely the fast kernels must match the reference (README_ops.md, "Tolerances").
enum class Accuracy {
  exact,         // both sides evaluate the same formula in the same type: equal, nan matching nan
  rounding,      // another evaluation order or approximation: tolerance(dtype), relative and absolute
  // a result whose error scales with something other than itself: the tolerance
  // times the op on the inputs' absolute values (for sums, reductions, products
  // and convolutions the sum of |terms|; for activation gradients |grad|)
  scaled,
  // the fast kernels' f32 accumulator overflows where the reference's f64 one
  // does not, and the result collapses (a norm's sum of squares reaching inf
  // divides every element to 0, as in PyTorch): only errors are compared
  errors_only,
};

using Outputs = std::vector<Tensor>;

struct Call {
  std::string name;            // the op and its non-tensor arguments, for reports
  std::vector<Tensor> inputs;  // every tensor the op reads or writes
  // The op on (copies of) `inputs`, in the same order; may write into them.
  std::function<Outputs(const std::vector<Tensor>&)> run;
  Accuracy accuracy = Accuracy::rounding;
  // scaled sums: the fast kernels' accumulator holds sum |term|^power (norm's p; 1 for sums).
  double power = 1;
  // scaled, where the op on the inputs' absolute values is not the scale of
  // its error: each result's magnitudes from the inputs (run in f64 with the
  // reference kernels; a layer norm's |w| (|x| + |mean|) / std).
  std::function<Outputs(const std::vector<Tensor>&)> scale = nullptr;
  // The op written another way whose nans are equally right (run with the
  // reference kernels, like `run`): where its result and the fast one are
  // both nan, the fast result passes. A convolution with its padding written
  // out as zeros, which PyTorch multiplies (0 * inf = nan) and the reference
  // skips; oneDNN does either, by kernel (Note [Padding and non-finite values]
  // in core/ops/conv.h).
  std::function<Outputs(const std::vector<Tensor>&)> nan_alternative = nullptr;
};

struct OpEntry {
  std::string_view name;
  // Null for the `grad` prefix, which runs the next op with gradients (ops.cpp).
  std::function<Call(Reader&, Pool&)> decode;
};

std::span<const OpEntry> op_table();

}  // namespace ember::fuzz
