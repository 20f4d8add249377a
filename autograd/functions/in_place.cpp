// In-place ops under autograd (Note [In-place ops and autograd] in
// autograd/README.md): the entry point computed `result` out of place, with
// its node recorded; here it is written into the target, whose history
// becomes result's. The target's version bumps, so a node that saved the
// target's old value refuses to run rather than use the new one.
#include "autograd/function.h"
#include "autograd/functions/families.h"
#include "core/ops/views.h"

namespace ember::autograd {

void register_in_place() {
  in_place_grad.set_recorder([](const GradRecord& r) {
    const Tensor& result = input(r, 0);
    Tensor& target = *r.outputs[0];
    EMBER_CHECK(!(target.is_leaf() && target.requires_grad()),
                "in-place operation on a leaf tensor that requires grad (shape {}); wrap it in NoGradGuard, or "
                "operate on a clone",
                target.shape());
    EMBER_CHECK(!(target.grad_fn() && target.grad_fn()->is_view),
                "in-place operation on a view ({}) of a tensor that requires grad is not supported; clone() it first",
                target.grad_fn() ? target.grad_fn()->name() : "");
    {
      NoGradGuard no_grad;
      copy_(target, result);
    }
    TensorImpl* impl = target.impl();
    if (!result.requires_grad()) {
      impl->autograd.reset();
      impl->requires_grad = false;
      return;
    }
    if (!impl->autograd) impl->autograd = std::make_shared<AutogradMeta>();
    impl->autograd->grad_fn = result.grad_fn();
    impl->autograd->output_nr = result.impl()->autograd->output_nr;
    impl->requires_grad = true;
  });
}

}  // namespace ember::autograd
