// nn::functional::linear and embedding (see linear.h).
#include "nn/functional/linear.h"

#include "core/error.h"
#include "core/ops/elementwise.h"
#include "core/ops/indexing.h"
#include "core/ops/linalg.h"
#include "core/ops/views.h"

namespace ember::nn::functional {

Tensor linear(const Tensor& input, const Tensor& weight, const Tensor& bias) {
  EMBER_CHECK(input.defined() && weight.defined(), "linear: the {} is undefined",
              input.defined() ? "weight" : "input");
  EMBER_CHECK(weight.dim() == 2, "linear: weight must be 2-d [out_features, in_features], got shape {}",
              weight.shape().str());
  EMBER_CHECK(input.dim() >= 1 && input.size(-1) == weight.size(1),
              "linear: input shape {} does not end in in_features {} (weight shape {})", input.shape().str(),
              weight.size(1), weight.shape().str());
  EMBER_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == weight.size(0)),
              "linear: bias shape {} does not match out_features {}", bias.shape().str(), weight.size(0));
  // weight.t() is a view: the GEMM reads the transposed layout directly.
  // [in] -> [1, in] -> [1, out] -> [out]: the bias goes through addmm as in
  // the batched case, so autocast casts it with the product's operands.
  if (input.dim() == 1) return linear(input.unsqueeze(0), weight, bias).squeeze(0);
  if (input.dim() == 2) return bias.defined() ? addmm(bias, input, weight.t()) : mm(input, weight.t());
  // [..., in] -> [rows, in] (a view for contiguous inputs) -> [rows, out] -> [..., out]
  Shape out_shape = input.shape();
  out_shape[out_shape.ndim() - 1] = weight.size(0);
  // The rows counted, not -1: with in_features 0 the size cannot say them.
  int64_t row_count = 1;
  for (int d = 0; d + 1 < input.dim(); ++d) row_count *= input.size(d);
  Tensor rows = input.reshape({row_count, weight.size(1)});
  Tensor out = bias.defined() ? addmm(bias, rows, weight.t()) : mm(rows, weight.t());
  return out.view(out_shape);
}

Tensor embedding(const Tensor& input, const Tensor& weight, std::optional<int64_t> padding_idx) {
  if (padding_idx) {
    // As PyTorch: a negative index counts from the end, and must be a row.
    const int64_t rows = weight.dim() > 0 ? weight.size(0) : 0;
    EMBER_CHECK(*padding_idx >= -rows && *padding_idx < rows,
                "embedding: padding_idx {} is not a row of the weight {} (from {} to {})", *padding_idx,
                weight.shape(), -rows, rows - 1);
    if (*padding_idx < 0) padding_idx = *padding_idx + rows;
  }
  Tensor out = ember::embedding(input, weight);
  if (padding_idx && out.requires_grad()) {
    // The padding positions read the weight without a gradient to it: only
    // this lookup's contribution to the row is blocked, and the gradient
    // with respect to the output (a saliency map, an embedding attack) is
    // whole, as PyTorch's. A hook zeroing the output's gradient took it
    // from those too. where, not a product: 0 * inf made the row's gradient NaN.
    Tensor keep = ne(input, *padding_idx).unsqueeze(-1);  // [..., 1]
    out = where(keep, out, out.detach());
  }
  return out;
}

}  // namespace ember::nn::functional
