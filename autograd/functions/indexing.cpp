// Gradients of the indexing family (forward: core/ops/indexing.cpp). Index
// tensors never get a gradient. Tests: tests/autograd/test_gradcheck.cpp.
#include "autograd/function.h"
#include "autograd/functions/families.h"
#include "core/ops/creation.h"
#include "core/ops/elementwise.h"
#include "core/ops/indexing.h"
#include "core/ops/indexing_kernels.h"
#include "core/ops/reduction.h"
#include "core/ops/views.h"

namespace ember::autograd {
namespace {

using Grads = std::vector<Tensor>;
using Saved = std::vector<Tensor>;

// zeros of `shape` with g's rows added at `index` (1-d) along dim: index_add.
Tensor index_add_into(const Shape& shape, int64_t dim, const Tensor& index, const Tensor& g) {
  Shape index_shape = Shape::filled(g.dim(), 1);
  index_shape[int(dim)] = index.numel();
  Tensor spread = index.reshape(index_shape).expand(g.shape());
  return scatter_add(zeros(shape, {.dtype = g.dtype(), .device = g.device()}), dim, spread, g);
}

// split, chunk: out_i = a.narrow(dim, start_i, size_i), views, one node for
// all of them  ->  da = [g_0; g_1; ...] along dim, zeros where an output got
// no gradient. One buffer of a's shape, each g_i written once into its
// slice (cat); a strided view's node per piece built a zero-filled gradient
// of a's shape each, which the engine then added. cat records its own node
// under create_graph, so the gradient is differentiable.
class SplitBackward final : public Node {
 public:
  SplitBackward(int64_t dim, std::vector<int64_t> sizes) : dim_(dim), sizes_(std::move(sizes)) {}
  std::string name() const override { return "SplitBackward"; }

  std::vector<Tensor> apply(std::vector<Tensor> grad_outputs) override {
    bool any = false;
    for (const Tensor& g : grad_outputs) any = any || g.defined();
    if (!any) return {};
    const InputMeta& meta = inputs[0];
    std::vector<Tensor> pieces;
    pieces.reserve(sizes_.size());
    for (size_t i = 0; i < sizes_.size(); ++i) {
      if (grad_outputs[i].defined()) {
        pieces.push_back(std::move(grad_outputs[i]));
        continue;
      }
      Shape shape = meta.shape;
      shape[int(dim_)] = sizes_[i];
      pieces.push_back(zeros(shape, {.dtype = meta.dtype, .device = meta.device}));
    }
    return {cat(pieces, dim_)};
  }

 private:
  int64_t dim_;
  std::vector<int64_t> sizes_;
};

}  // namespace

void register_indexing_functions() {
  // cat: out = [a0; a1; ...] along dim  ->  da_i = the slice of g where a_i landed
  cat_grad.set_recorder([](const GradRecord& r) {
    int64_t dim = params<int64_t>(r);
    std::vector<int64_t> sizes;
    int64_t d = -1;
    for (const Tensor* t : r.inputs) {
      bool skipped = t->dim() == 1 && t->numel() == 0 && output(r, 0).dim() != 1;  // PyTorch's legacy empty input
      if (d < 0 && !skipped) d = wrap_dim(dim, t->dim(), "cat");
      sizes.push_back(skipped ? -1 : t->shape()[int(wrap_dim(dim, t->dim(), "cat"))]);
    }
    record_formula(r, "CatBackward", {}, [sizes, d](const Saved&, const Tensor& g) {
      Grads grads;
      int64_t start = 0;
      for (int64_t size : sizes) {
        grads.push_back(size < 0 ? Tensor() : g.narrow(d, start, size));
        start += std::max<int64_t>(size, 0);
      }
      return grads;
    });
  });
  split_grad.set_recorder([](const GradRecord& r) {
    int64_t dim = params<int64_t>(r);
    std::vector<int64_t> sizes;
    for (const Tensor* piece : r.outputs) sizes.push_back(piece->shape()[int(dim)]);
    record<SplitBackward>(r, dim, std::move(sizes));
  });
  // index_select: out = a[index] along dim  ->  da = zeros with g's slices added at index
  index_select_grad.set_recorder([](const GradRecord& r) {
    Shape shape = input(r, 0).shape();
    int64_t dim = shape.ndim() == 0 ? 0 : wrap_dim(params<int64_t>(r), shape.ndim(), "index_select");
    record_formula(r, "IndexSelectBackward", {input(r, 1)}, [=](const Saved& s, const Tensor& g) {
      if (shape.ndim() == 0) return Grads{sum(g), Tensor()};
      return Grads{index_add_into(shape, dim, s[0].reshape({-1}), g), Tensor()};
    });
  });
  // embedding: out[..., :] = weight[indices[...], :]  ->  dweight = rows of g added at their indices
  embedding_grad.set_recorder([](const GradRecord& r) {
    Shape shape = input(r, 0).shape();
    record_formula(r, "EmbeddingBackward", {input(r, 1)}, [shape](const Saved& s, const Tensor& g) {
      return Grads{index_add_into(shape, 0, s[0].reshape({-1}), g.reshape({-1, shape[1]})), Tensor()};
    });
  });
  // gather: out = a[index] along dim  ->  da = zeros with g added at index
  gather_grad.set_recorder([](const GradRecord& r) {
    Shape shape = input(r, 0).shape();
    int64_t dim = params<int64_t>(r);
    record_formula(r, "GatherBackward", {input(r, 1)}, [=](const Saved& s, const Tensor& g) {
      return Grads{scatter_add(zeros(shape, {.dtype = g.dtype(), .device = g.device()}), dim, s[0], g), Tensor()};
    });
  });
  // scatter_add: out = a, then src added at index  ->  da = g, dsrc = g gathered at index.
  // Only src's leading block of index's shape is added; the rest of src gets
  // a zero gradient (PyTorch refuses this backward; its forward is the same).
  scatter_add_grad.set_recorder([](const GradRecord& r) {
    int64_t dim = params<int64_t>(r);
    Shape src_shape = input(r, 2).shape();
    record_formula(r, "ScatterAddBackward", {input(r, 1)}, [dim, src_shape](const Saved& s, const Tensor& g) {
      Tensor grad_src = gather(g, dim, s[0]);
      std::vector<int64_t> widths;  // pad's order: the last dim's (before, after) first
      for (int d = src_shape.ndim() - 1; d >= 0; --d) widths.insert(widths.end(), {0, src_shape[d] - grad_src.size(d)});
      if (grad_src.shape() != src_shape) grad_src = pad(grad_src, widths);
      return Grads{g, Tensor(), grad_src};
    });
  });
  // masked_fill: out = mask ? value : a  ->  da = g where the mask is false
  masked_fill_grad.set_recorder([](const GradRecord& r) {
    record_formula(r, "MaskedFillBackward", {input(r, 1)}, [](const Saved& s, const Tensor& g) {
      return Grads{masked_fill(g, s[0], 0), Tensor()};
    });
  });
  // tril / triu: out = a with one triangle zeroed  ->  da = g with the same triangle zeroed
  tril_grad.set_recorder([](const GradRecord& r) {
    int64_t diagonal = params<int64_t>(r);
    record_formula(r, "TrilBackward", {}, [diagonal](const Saved&, const Tensor& g) { return Grads{tril(g, diagonal)}; });
  });
  triu_grad.set_recorder([](const GradRecord& r) {
    int64_t diagonal = params<int64_t>(r);
    record_formula(r, "TriuBackward", {}, [diagonal](const Saved&, const Tensor& g) { return Grads{triu(g, diagonal)}; });
  });
  // repeat: out tiles a r_d times along each dim  ->  da = g summed over the tiles
  repeat_grad.set_recorder([](const GradRecord& r) {
    Shape repeats = params<Shape>(r), shape = input(r, 0).shape();
    record_formula(r, "RepeatBackward", {}, [repeats, shape](const Saved&, const Tensor& g) {
      Tensor grad = g;
      int lead = repeats.ndim() - shape.ndim();
      for (int d = repeats.ndim() - 1; d >= 0; --d) {  // from the last dim, so earlier dim numbers stay valid
        int64_t size = d < lead ? 1 : shape[d - lead];
        grad = sum(grad.unflatten(d, {repeats[d], size}), {d});
      }
      return Grads{grad.reshape(shape)};
    });
  });
  // pad: out = a with borders added (or cropped)  ->  da = g with the borders cropped (or zero-padded)
  pad_grad.set_recorder([](const GradRecord& r) {
    std::vector<int64_t> inverse = params<std::vector<int64_t>>(r);
    for (int64_t& amount : inverse) amount = -amount;
    record_formula(r, "PadBackward", {}, [inverse](const Saved&, const Tensor& g) { return Grads{pad(g, inverse, 0)}; });
  });
}

}  // namespace ember::autograd
