// libFuzzer target: the op fuzzer (tests/fuzz/README_ops.md). The input is a
// program of ops (decoded by ops/program.h, ops listed in ops/table.h); each
// op runs twice on the same inputs, with the fast kernels and with the
// reference ones (Note [Reference mode], core/README.md), and the two must
// agree: both raise ember::Error, or neither does and every result and every
// written input matches within its tolerance (ops/compare.h). Anything else
// (a mismatch, another exception, an internal error) prints the op and traps;
// ASan and UBSan trap on their own. EMBER_FUZZ_TRACE=1 prints each op as it
// runs, which is how a reproducer is read.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <span>

#include "fuzz/ops/compare.h"
#include "fuzz/ops/table.h"

namespace ember::fuzz {
namespace {

// Ops per input, and the largest result kept as a later operand: about a
// millisecond per input in the sanitizer build.
constexpr int kMaxOps = 24;
constexpr int64_t kMaxPooledElements = 4096;

bool tracing() {
  static const bool on = std::getenv("EMBER_FUZZ_TRACE") != nullptr;
  return on;
}

[[noreturn]] void fail(const Call& call, const std::string& what) {
  std::fprintf(stderr, "\nember op fuzzer: %s\n  op: %s\n", what.c_str(), call.name.c_str());
  for (size_t i = 0; i < call.inputs.size(); ++i)
    std::fprintf(stderr, "  input %zu: %s\n", i, describe(call.inputs[i]).c_str());
  std::fflush(stderr);
  __builtin_trap();
}

// Fresh copies of `tensors` with the same geometry. Tensors that share
// storage share the copy's, and a tensor given twice is one tensor (one
// autograd leaf), so aliasing between operands survives.
std::vector<Tensor> duplicate(const std::vector<Tensor>& tensors) {
  std::map<const Storage*, std::shared_ptr<Storage>> storages;
  std::map<const TensorImpl*, Tensor> copies;
  std::vector<Tensor> out;
  for (const Tensor& t : tensors) {
    if (!t.defined()) {
      out.emplace_back();
      continue;
    }
    Tensor& copy = copies[t.impl()];
    if (!copy.defined()) {
      std::shared_ptr<Storage>& storage = storages[t.storage().get()];
      if (!storage) {
        storage = std::make_shared<Storage>(t.storage()->nbytes(), t.device());
        if (storage->nbytes() > 0) std::memcpy(storage->data(), t.storage()->data(), storage->nbytes());
      }
      copy = Tensor::make(storage, t.dtype(), t.shape(), t.strides(), t.offset());
    }
    out.push_back(copy);
  }
  return out;
}

// The whole storage behind `t`, as a flat tensor: what an in-place op may write.
Tensor whole_storage(const Tensor& t) {
  const int64_t count = int64_t(t.storage()->nbytes()) / t.element_size();
  return Tensor::make(t.storage(), t.dtype(), {count}, {1}, 0);
}

struct Outcome {
  Outputs outputs;
  std::vector<Tensor> grads;  // with gradients: each input's, undefined where it needs none
  std::optional<std::string> error;
};

// d(sum_k <output_k, pattern>)/d(inputs): a fixed pattern of +-1, +-0.5 and 0
// as each output's gradient, so that no gradient hides behind a plain sum.
std::vector<Tensor> gradients(const std::vector<Tensor>& inputs, const Outputs& outputs) {
  Tensor loss;
  for (const Tensor& out : outputs) {
    if (!out.defined() || !out.requires_grad()) continue;
    std::vector<double> pattern(static_cast<size_t>(out.numel()));
    for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = double(int64_t(i * 7 % 5) - 2) * 0.5;
    Tensor weights = from_vector(pattern).reshape(out.shape()).to(out.dtype());
    Tensor term = sum(mul(out, weights)).to(DType::f64);
    loss = loss.defined() ? add(loss, term) : term;
  }
  std::vector<Tensor> grads;
  if (!loss.defined()) return grads;
  loss.backward();
  for (const Tensor& t : inputs) grads.push_back(t.defined() && t.requires_grad() ? t.grad() : Tensor());
  return grads;
}

Outcome run_once(const Call& call, const std::vector<Tensor>& inputs, bool with_grad) {
  Outcome outcome;
  try {
    outcome.outputs = call.run(inputs);
    if (with_grad) outcome.grads = gradients(inputs, outcome.outputs);
  } catch (const Error& e) {
    std::string message = e.what();
    if (message.starts_with("internal error")) fail(call, message);
    outcome.error = std::move(message);
  } catch (const std::exception& e) {
    fail(call, fmt::format("{} raised a non-ember exception: {}", reference_mode() ? "reference" : "fast", e.what()));
  }
  return outcome;
}

// Copies of the inputs as autograd leaves: the f64 ones require grad.
std::vector<Tensor> leaves(const std::vector<Tensor>& inputs) {
  std::vector<Tensor> out = duplicate(inputs);
  for (Tensor& t : out)
    if (t.defined() && t.dtype() == DType::f64) t.requires_grad_(true);
  return out;
}

// The op on the inputs' absolute values in f64, with the reference kernels:
// each output's sum of |terms|, the scale of its rounding error (or the
// call's own `scale`).
Outputs magnitudes(const Call& call) {
  ReferenceModeGuard reference;
  NoGradGuard no_grad;
  try {
    std::vector<Tensor> absolute;
    for (const Tensor& t : call.inputs) {
      if (!t.defined() || t.dtype() == DType::boolean) absolute.push_back(t);
      else absolute.push_back(abs(is_floating(t.dtype()) ? t.to(DType::f64) : t));  // valid indices stay themselves
    }
    return call.scale ? call.scale(call.inputs) : call.run(absolute);
  } catch (const Error&) {
    return {};
  }
}

// Call::nan_alternative's results with the reference kernels, from copies
// of the inputs taken before the fast run writes into them; none where it
// raises or the call has none.
Outputs nan_alternatives(const Call& call) {
  if (!call.nan_alternative) return {};
  ReferenceModeGuard reference;
  NoGradGuard no_grad;
  try {
    return call.nan_alternative(duplicate(call.inputs));
  } catch (const Error&) {
    return {};
  }
}

// `reference`, with nan wherever `alternative` and `fast` are both nan.
Tensor accept_alternative_nans(const Tensor& fast, const Tensor& reference, const Tensor& alternative) {
  if (!fast.defined() || !reference.defined() || !alternative.defined() || !is_floating(reference.dtype()) ||
      fast.shape() != reference.shape() || alternative.shape() != reference.shape() ||
      fast.dtype() != reference.dtype() || alternative.dtype() != reference.dtype())
    return reference;
  ReferenceModeGuard guard;
  NoGradGuard no_grad;
  return where(logical_and(isnan(fast.detach()), isnan(alternative)), alternative, reference.detach());
}

// Lowers `expected.precision` to the least precise floating dtype of `tensors`.
void coarsen_precision(Expectation& expected, const std::vector<Tensor>& tensors) {
  for (const Tensor& t : tensors)
    if (t.defined() && is_floating(t.dtype()) && tolerance(t.dtype()) > tolerance(expected.precision))
      expected.precision = t.dtype();
}

void check(const Call& call, const std::string& what, const Tensor& fast, const Tensor& reference,
           const Expectation& expected) {
  std::string found = difference(fast, reference, expected);
  if (found.empty()) return;
  fail(call, fmt::format("{} differs from the reference: {}\n  fast:      {}\n  reference: {}", what, found,
                         describe(fast), describe(reference)));
}

// A call with only a name, for failures before the op's arguments exist.
Call nameless(std::string_view op) {
  Call call;
  call.name = std::string(op);
  return call;
}

void execute(Reader& in, Pool& pool) {
  std::span<const OpEntry> table = op_table();
  const OpEntry* entry = &table[in.byte() % table.size()];
  const bool grad_prefix = !entry->decode;
  if (grad_prefix) entry = &table[in.byte() % table.size()];
  if (!entry->decode) return;
  Call call;
  try {
    call = entry->decode(in, pool);
  } catch (const Error& e) {
    if (std::string_view(e.what()).starts_with("internal error")) fail(nameless(entry->name), e.what());
    return;  // the decoder's own set-up was refused (say, abs of a bool weight): no op to run
  } catch (const std::exception& e) {
    fail(nameless(entry->name), fmt::format("decoding raised a non-ember exception: {}", e.what()));
  }
  bool with_grad = false;
  for (const Tensor& t : call.inputs) with_grad |= grad_prefix && t.defined() && t.dtype() == DType::f64;
  Expectation expected{.accuracy = call.accuracy, .power = call.power};
  for (const Tensor& t : call.inputs)
    if (t.defined()) expected.terms = std::max(expected.terms, t.numel());
  // A result computed from a less precise input may carry its rounding: an
  // f64 binary_cross_entropy_with_logits of an f32 input and an f64 target
  // takes log(1 + exp(-|x|)) of the f32 x in f32, as PyTorch's composite does.
  coarsen_precision(expected, call.inputs);
  Outputs scales = call.accuracy == Accuracy::scaled ? magnitudes(call) : Outputs{};
  Outputs alternatives = nan_alternatives(call);

  // The fast run works on the pool's own tensors (an in-place op changes them
  // for later ops, as in a program); the reference run on copies made first.
  std::vector<Tensor> reference_inputs = with_grad ? leaves(call.inputs) : duplicate(call.inputs);
  std::vector<Tensor> fast_inputs = with_grad ? leaves(call.inputs) : call.inputs;
  if (tracing()) {
    std::fprintf(stderr, "op %s%s\n", with_grad ? "(with gradients) " : "", call.name.c_str());
    for (const Tensor& t : call.inputs)
      std::fprintf(stderr, "  input %s\n%s\n", describe(t).c_str(), t.defined() ? t.str().c_str() : "");
  }
  Outcome fast = run_once(call, fast_inputs, with_grad);
  Outcome reference;
  {
    ReferenceModeGuard guard;
    reference = run_once(call, reference_inputs, with_grad);
  }
  if (fast.error.has_value() != reference.error.has_value())
    fail(call, fmt::format("only the {} kernels raised ember::Error: {}", fast.error ? "fast" : "reference",
                           fast.error ? *fast.error : *reference.error));
  if (tracing()) std::fprintf(stderr, "  -> %s\n", fast.error ? fast.error->c_str() : "ok");
  if (fast.error || call.accuracy == Accuracy::errors_only) return;

  if (fast.outputs.size() != reference.outputs.size())
    fail(call, fmt::format("{} results vs {} from the reference", fast.outputs.size(), reference.outputs.size()));
  for (size_t i = 0; i < fast.outputs.size(); ++i) {
    Expectation output_expected = expected;
    if (i < scales.size()) output_expected.magnitude = scales[i];
    Tensor expected_output = reference.outputs[i];
    if (i < alternatives.size()) expected_output = accept_alternative_nans(fast.outputs[i], expected_output, alternatives[i]);
    check(call, fmt::format("result {}", i), fast.outputs[i], expected_output, output_expected);
  }
  // Whatever the op wrote into its inputs (in place, or running statistics) must agree too.
  Expectation written = expected;
  if (written.accuracy == Accuracy::scaled) written.accuracy = Accuracy::rounding;
  for (size_t i = 0; i < call.inputs.size(); ++i)
    if (call.inputs[i].defined())
      check(call, fmt::format("the storage of input {}", i), whole_storage(fast_inputs[i]),
            whole_storage(reference_inputs[i]), written);
  if (fast.grads.size() != reference.grads.size())
    fail(call, fmt::format("{} gradients vs {} from the reference", fast.grads.size(), reference.grads.size()));
  // A broadcast operand's gradient sums over the dims it was broadcast along,
  // in each side's order: never better than rounding.
  Expectation gradient = written;
  if (gradient.accuracy == Accuracy::exact) gradient.accuracy = Accuracy::rounding;
  coarsen_precision(gradient, fast.outputs);
  for (size_t i = 0; i < fast.grads.size(); ++i)
    check(call, fmt::format("the gradient of input {}", i), fast.grads[i], reference.grads[i], gradient);

  for (const Tensor& out : fast.outputs)
    if (out.defined() && out.numel() <= kMaxPooledElements) pool.add(with_grad ? out.detach() : out);
}

}  // namespace
}  // namespace ember::fuzz

// Some results take their size from values: one_hot of an index of 2^31
// infers 2^31 + 1 classes, a 17 GB tensor, as PyTorch would. ASan grants
// that much address space and the fill then meets the fuzzer's RSS limit,
// which ends the run as an out-of-memory crash. Capped here, such an
// allocation fails on both sides as the allocator's out-of-memory error.
// Defaults: ASAN_OPTIONS still overrides them.
extern "C" const char* __asan_default_options() { return "max_allocation_size_mb=256:allocator_may_return_null=1"; }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ember::fuzz::Reader in(data, size);
  ember::fuzz::Pool pool;
  for (int op = 0; op < ember::fuzz::kMaxOps && !in.done(); ++op) ember::fuzz::execute(in, pool);
  return 0;
}
