// In-place ops under autograd (Note [In-place ops and autograd] in
// autograd/README.md): the entry point computed `result` out of place, with
// its node recorded; here it is written into the target, whose history
// becomes result's. When the target is a view, its base takes a CopySlices
// history: the base's old history outside the view, result's inside, as in
// PyTorch. Tests: tests/autograd/test_in_place.cpp.
#include "autograd/function.h"
#include "autograd/functions/families.h"
#include "core/ops/creation.h"
#include "core/ops/views.h"

namespace ember::autograd {
namespace {

bool has_history(const TensorImpl& impl) { return impl.autograd && impl.autograd->grad_fn; }

// Where a tensor's elements lie in its storage.
struct Geometry {
  Shape shape;
  Strides strides;
  int64_t offset;
};

Geometry geometry_of(const TensorImpl& impl) { return {impl.shape, impl.strides, impl.offset}; }

// One past the last storage element a geometry reaches (its offset when empty).
int64_t end_of(const Geometry& g) { return g.offset + extent(g.shape, g.strides); }

// Whether two elements of the geometry share a storage element (an expanded view).
// The base after an in-place write into its view: base_new = base_old outside
// the view and the written result inside it. So
//   d base_old = g with the view's elements zeroed,  d result = g at the view's elements.
// Both are read through a buffer laid out like the storage (the view and the
// base are two geometries over it). Under create_graph the writes into the
// buffer are themselves in-place writes into views, recorded by this node's
// own kind, so the formula is differentiable.
class CopySlices final : public Node {
 public:
  CopySlices(Geometry base, Geometry view) : base_(std::move(base)), view_(std::move(view)) {
    origin_ = std::min(base_.offset, view_.offset);
    size_ = std::max(end_of(base_), end_of(view_)) - origin_;
  }
  std::string name() const override { return "CopySlices"; }

  std::vector<Tensor> apply(std::vector<Tensor> grad_outputs) override {
    const Tensor& g = grad_outputs[0];
    if (!g.defined()) return {};
    Tensor grad_result, grad_base;
    if (next[1].node) {
      Tensor memory = zeros({size_}, {.dtype = g.dtype(), .device = g.device()});
      at(memory, base_).copy_(g);
      grad_result = at(memory, view_);
    }
    if (next[0].node) {
      Tensor memory = zeros({size_}, {.dtype = g.dtype(), .device = g.device()});
      at(memory, base_).copy_(g);
      at(memory, view_).fill_(0);
      grad_base = at(memory, base_);
    }
    return {grad_base, grad_result};
  }

 private:
  Tensor at(const Tensor& memory, const Geometry& g) const {
    return as_strided(memory, g.shape, g.strides, g.offset - origin_);
  }

  Geometry base_, view_;
  int64_t origin_ = 0, size_ = 0;
};

// A tensor with a history, overwritten whole with values that have none
// (fill_, copy_ of a constant): it still requires grad, as in PyTorch, and
// its old value's gradient is zero (PyTorch's FillBackward0 and CopyBackwards).
class OverwrittenBackward final : public Node {
 public:
  std::string name() const override { return "OverwrittenBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor> grad_outputs) override {
    const Tensor& g = grad_outputs[0];
    if (!g.defined()) return {};
    return {zeros_like(g)};
  }
};

// Gives `base` (whose view `target` was just written with `result`) its CopySlices history.
void rebase(const std::shared_ptr<TensorImpl>& base_impl, const Tensor& target, const Tensor& result) {
  Tensor base(base_impl);
  auto node = std::make_shared<CopySlices>(geometry_of(*base_impl), geometry_of(*target.impl()));
  const Tensor* inputs[] = {&base, &result};
  Tensor* outputs[] = {&base};
  connect(node, inputs, outputs);
  if (base_impl->autograd && base_impl->autograd->retains_grad) retain_grad_at_history(base);
}

}  // namespace

void register_in_place() {
  in_place_grad.set_recorder([](const GradRecord& r) {
    const Tensor& result = input(r, 0);
    Tensor& target = *r.outputs[0];
    TensorImpl* impl = target.impl();
    std::shared_ptr<TensorImpl> base = impl->view_base;
    EMBER_CHECK(!(impl->requires_grad && !has_history(*impl)),
                "in-place operation on a leaf tensor that requires grad (shape {}); wrap it in NoGradGuard, or "
                "operate on a clone",
                target.shape());
    EMBER_CHECK(!(base && (impl->view_of_grad_leaf || (base->requires_grad && !has_history(*base)))),
                "in-place operation on a view (shape {}) of a leaf tensor that requires grad, or did when the view "
                "was made (shape {}); wrap it in NoGradGuard, or operate on a clone",
                target.shape(), base ? base->shape : Shape{});
    const std::shared_ptr<Node>& history = impl->autograd ? impl->autograd->grad_fn : nullptr;
    EMBER_CHECK(!(history && history->refuses_in_place),
                "in-place operation on a view ({}) of a tensor that requires grad whose gradient through the write "
                "would be wrong (a custom function's output sharing its input's memory, or an as_strided reaching "
                "memory outside its input's elements); clone() it first",
                history ? history->name() : "");
    const bool rebases = base && (base->requires_grad || result.requires_grad());
    EMBER_CHECK(!(rebases && elements_may_share_memory(target.shape(), target.strides())),
                "in-place operation on a view (shape {}, strides {}) of a tensor involved in autograd whose elements "
                "share memory (an expanded view, or one of as_strided): several of its elements are one memory "
                "location; clone() it first",
                target.shape(), target.strides());
    {
      NoGradGuard no_grad;
      copy_(target, result);
    }
    if (rebases) rebase(base, target, result);
    if (!result.requires_grad() && !base && has_history(*impl)) {
      const Tensor* inputs[] = {&target};
      Tensor* outputs[] = {&target};
      connect(std::make_shared<OverwrittenBackward>(), inputs, outputs);
      if (impl->autograd->retains_grad) retain_grad_at_history(target);
      return;
    }
    if (!result.requires_grad()) {
      if (impl->autograd) impl->autograd->grad_fn.reset();
      impl->requires_grad = false;
      return;
    }
    if (r.params && !base && has_history(*impl)) {
      // copy_ (params set) of values that require grad over a tensor with a
      // history: its old value's gradient is zero, not none, as PyTorch's
      // CopyBackwards (an optimizer skipped a parameter with no .grad, where
      // PyTorch's weight decay stepped it). The target is its own "base".
      rebase(target.impl_ptr(), target, result);
      return;
    }
    if (!impl->autograd) impl->autograd = std::make_shared<AutogradMeta>();
    impl->autograd->grad_fn = result.impl()->autograd->grad_fn;
    impl->autograd->output_nr = result.impl()->autograd->output_nr;
    impl->autograd->history_version = target.version();
    impl->requires_grad = true;
    if (impl->autograd->retains_grad) retain_grad_at_history(target);
  });
}

}  // namespace ember::autograd
