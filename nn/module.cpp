// nn::Module: registration, the recursive listings, state dicts and printing (see module.h).
#include "nn/module.h"

#include "core/shown_text.h"

#include <algorithm>
#include <map>
#include <set>
#include <typeinfo>
#include <unordered_map>
#include <unordered_set>

#include "autograd/accumulate_grad.h"
#include "autograd/custom_function.h"
#include "autograd/node.h"
#include "core/grad_hook.h"
#include "core/ops/creation.h"
#include "core/ops/views.h"
#include "nn/normalization.h"

namespace ember::nn {

namespace {

// PyTorch's _addindent: every line but the first gains `spaces` spaces.
std::string add_indent(const std::string& text, int spaces) {
  std::string out;
  for (char c : text) {
    out += c;
    if (c == '\n') out.append(size_t(spaces), ' ');
  }
  return out;
}

// Note [Parameters change in place]: `target` takes over `source`'s storage and
// geometry, so every handle to target (an optimizer's, a tied module's) sees
// the new dtype or device. A live accumulator recorded the old dtype; dropping
// our reference makes the next backward build a fresh one.
void replace_contents(const Tensor& target, const Tensor& source) {
  if (source.is_same(target)) return;
  TensorImpl* impl = target.impl();
  impl->storage = source.storage();
  impl->shape = source.shape();
  impl->strides = source.strides();
  impl->offset = source.offset();
  impl->numel = source.numel();
  impl->contiguous = source.is_contiguous();
  impl->dtype = source.dtype();
  if (impl->autograd) impl->autograd->accumulator.reset();
}

template <class Convert>
void convert_in_place(const Tensor& tensor, const Convert& convert) {
  if (!tensor.defined()) return;
  replace_contents(tensor, convert(tensor.detach()));
  if (Tensor grad = tensor.grad(); grad.defined()) replace_contents(grad, convert(grad));
}

}  // namespace

AliasKey alias_key(const Tensor& tensor) {
  return {tensor.storage().get(), tensor.offset(), tensor.shape().str() + tensor.strides().str()};
}

NamedTensors without_aliases(const NamedTensors& state) {
  NamedTensors out;
  std::set<AliasKey> seen;
  for (const auto& entry : state)
    if (seen.insert(alias_key(entry.second)).second) out.push_back(entry);
  return out;
}

Tensor Module::forward(const Tensor&) {
  EMBER_CHECK(false, "{}: has no single-tensor forward (call its own forward with the arguments it takes)",
              type_name());
  return {};
}

std::string Module::type_name() const { return autograd::short_type_name(typeid(*this)); }

std::string Module::str() const {
  // PyTorch's Module.__repr__: a one-liner when there are no children and
  // extra_repr has one line, otherwise one indented line per item.
  std::vector<std::string> lines;
  std::string extra = extra_repr();
  size_t extra_lines = 0;
  if (!extra.empty()) {
    size_t start = 0;
    while (true) {
      size_t end = extra.find('\n', start);
      lines.push_back(extra.substr(start, end == std::string::npos ? std::string::npos : end - start));
      ++extra_lines;
      if (end == std::string::npos) break;
      start = end + 1;
    }
  }
  for (const auto& [name, module] : children_) lines.push_back("(" + name + "): " + add_indent(module->str(), 2));
  std::string out = type_name() + "(";
  if (extra_lines == 1 && children_.empty()) {
    out += lines[0];
  } else if (!lines.empty()) {
    for (const std::string& line : lines) out += "\n  " + line;
    out += "\n";
  }
  return out + ")";
}

void Module::check_new_name(const std::string& name, const char* what) const {
  EMBER_CHECK(!name.empty(), "{}: {} name can't be empty", type_name(), what);
  EMBER_CHECK(name.find('.') == std::string::npos, "{}: {} name can't contain \".\", got \"{}\"", type_name(), what,
              name);
  bool taken = false;
  for (const auto& entry : parameters_) taken |= entry.first == name;
  for (const Buffer& buffer : buffers_) taken |= buffer.name == name;
  for (const auto& entry : children_) taken |= entry.first == name;
  EMBER_CHECK(!taken, "{}: attribute \"{}\" already exists, cannot register {} of that name", type_name(), name, what);
}

Parameter::Parameter(const Tensor& data, bool requires_grad) : Tensor(data.detach()) {
  impl()->is_parameter = true;
  requires_grad_(requires_grad);
}

Tensor& Module::register_parameter(const std::string& name, Tensor tensor, std::optional<bool> requires_grad) {
  check_new_name(name, "parameter");
  if (tensor.defined()) {
    EMBER_CHECK(tensor.is_leaf(), "{}: parameter \"{}\" must be a leaf tensor (detach it first)", type_name(), name);
    // A tensor registered elsewhere keeps its own flag: registering a frozen
    // shared weight here must not unfreeze it in its first module.
    if (!tensor.impl()->is_parameter || requires_grad) tensor.requires_grad_(requires_grad.value_or(true));
    tensor.impl()->is_parameter = true;
  }
  return parameters_.emplace_back(name, std::move(tensor)).second;
}

void Module::refuse_plain_parameter(const std::string& prefix, const std::string& name, const Tensor& tensor) const {
  EMBER_CHECK(tensor.is_leaf(),
              "{}: parameter \"{}\" holds a tensor computed by {} (not a leaf), so no optimizer could update it: "
              "assign a parameter (another module's, to tie weights) or compute the tensor inside forward",
              type_name(), prefix + name, tensor.grad_fn() ? tensor.grad_fn()->name() : "an op");
  ::ember::detail::throw_error(fmt::format(
      "{}: parameter \"{}\" holds a plain tensor ({}, {}, requires_grad={}), not a parameter, so no optimizer holds "
      "it and it would not train: assign nn::Parameter(tensor) (nn::Parameter(tensor, false) to freeze it), or another "
      "module's parameter to tie weights, as PyTorch's setattr requires",
      type_name(), prefix + name, tensor.dtype(), tensor.shape(), python_repr(tensor.requires_grad())));
}

Tensor& Module::register_buffer(const std::string& name, Tensor tensor, bool persistent) {
  check_new_name(name, "buffer");
  return buffers_.emplace_back(Buffer{name, std::move(tensor), persistent}).tensor;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> module) {
  check_new_name(name, "module");
  EMBER_CHECK(module != nullptr, "{}: module \"{}\" is null", type_name(), name);
  EMBER_CHECK(module.get() != this, "{}: cannot register a module as its own child \"{}\"", type_name(), name);
  // A cycle (a inside b inside a) made every walk of the tree recurse until
  // the stack ran out: state_dict() segfaulted.
  for (const auto& [path, inside] : module->named_modules())
    EMBER_CHECK(inside != this,
                "{}: registering {} as \"{}\" would make a cycle: this module is already inside it (at \"{}\")",
                type_name(), module->type_name(), name, path);
  children_.emplace_back(name, std::move(module));
}

void Module::collect_tensors(const std::string& prefix, bool parameters, bool recurse, NamedTensors& out,
                             std::unordered_set<const TensorImpl*>& seen) const {
  auto add = [&](const std::string& name, const Tensor& tensor) {
    if (tensor.defined() && seen.insert(tensor.impl()).second) out.emplace_back(prefix + name, tensor);
  };
  if (parameters) {
    for (const auto& [name, tensor] : parameters_) {
      // A member bound to the slot may have been assigned anything (Note [Parameter slots]).
      if (tensor.defined() && (!tensor.impl()->is_parameter || !tensor.is_leaf()))
        refuse_plain_parameter(prefix, name, tensor);
      add(name, tensor);
    }
  } else {
    for (const Buffer& buffer : buffers_) add(buffer.name, buffer.tensor);
  }
  if (!recurse) return;
  for (const auto& [name, module] : children_)
    module->collect_tensors(prefix + name + ".", parameters, recurse, out, seen);
}

NamedTensors Module::named_parameters(bool recurse) const {
  NamedTensors out;
  std::unordered_set<const TensorImpl*> seen;
  collect_tensors("", true, recurse, out, seen);
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& entry : named_parameters(recurse)) out.push_back(std::move(entry.second));
  return out;
}

NamedTensors Module::named_buffers(bool recurse) const {
  NamedTensors out;
  std::unordered_set<const TensorImpl*> seen;
  collect_tensors("", false, recurse, out, seen);
  return out;
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& entry : named_buffers(recurse)) out.push_back(std::move(entry.second));
  return out;
}

NamedModules Module::named_children() const {
  NamedModules out;
  for (const auto& entry : children_) {
    auto same = [&](const auto& listed) { return listed.second == entry.second; };
    if (std::find_if(out.begin(), out.end(), same) == out.end()) out.push_back(entry);
  }
  return out;
}

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (auto& entry : named_children()) out.push_back(std::move(entry.second));
  return out;
}

const std::shared_ptr<Module> Module::child(const std::string& name) const {
  std::string names;
  for (const auto& [child_name, module] : children_) {
    if (child_name == name) return module;
    names += (names.empty() ? "" : ", ") + child_name;
  }
  EMBER_CHECK(false, "{}: no submodule named \"{}\" (it has: {})", type_name(), name, names);
  return nullptr;
}

void Module::collect_modules(const std::string& prefix, std::vector<std::pair<std::string, Module*>>& out,
                             std::unordered_set<const Module*>& seen) {
  if (!seen.insert(this).second) return;
  out.emplace_back(prefix, this);
  for (const auto& [name, module] : children_)
    module->collect_modules(prefix.empty() ? name : prefix + "." + name, out, seen);
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out;
  std::unordered_set<const Module*> seen;
  collect_modules("", out, seen);
  return out;
}

std::vector<Module*> Module::modules() {
  std::vector<Module*> out;
  for (const auto& entry : named_modules()) out.push_back(entry.second);
  return out;
}

Module& Module::train(bool on) {
  for (Module* module : modules()) module->training_ = on;
  return *this;
}

Module& Module::to(DType dtype) {
  EMBER_CHECK(is_floating(dtype), "{}.to: only floating dtypes are allowed, got {}", type_name(), dtype);
  auto convert = [dtype](const Tensor& t) { return ember::to(t, dtype); };
  // Floating tensors only, as PyTorch: an integer parameter (codes, indices) keeps its values.
  for (const Tensor& tensor : parameters())
    if (is_floating(tensor.dtype())) convert_in_place(tensor, convert);
  for (const Tensor& tensor : buffers())
    if (is_floating(tensor.dtype())) convert_in_place(tensor, convert);
  return *this;
}

Module& Module::to(Device device) {
  auto convert = [device](const Tensor& t) { return ember::to(t, device); };
  for (const Tensor& tensor : parameters()) convert_in_place(tensor, convert);
  for (const Tensor& tensor : buffers()) convert_in_place(tensor, convert);
  return *this;
}

void Module::zero_grad(bool set_to_none) {
  for (const Tensor& parameter : parameters()) autograd::zero_grad(parameter, set_to_none);
}

// A child registered under two names is visited once, as PyTorch's
// children() lists it once (an initialiser that scales in place must not
// run twice on it).
Module& Module::apply(const std::function<void(Module&)>& fn) {
  for (const std::shared_ptr<Module>& child : children()) child->apply(fn);
  fn(*this);
  return *this;
}

void Module::collect_state(const std::string& prefix, NamedTensors& out) const {
  for (const auto& [name, tensor] : parameters_)
    if (tensor.defined()) out.emplace_back(prefix + name, tensor.detach());
  for (const Buffer& buffer : buffers_)
    if (buffer.tensor.defined() && buffer.persistent) out.emplace_back(prefix + buffer.name, buffer.tensor.detach());
  for (const auto& [name, module] : children_) module->collect_state(prefix + name + ".", out);
}

NamedTensors Module::state_dict() const {
  NamedTensors out;
  collect_state("", out);
  return out;
}

LoadStateDictResult Module::load_state_dict(const NamedTensors& state, bool strict) {
  NamedTensors expected;
  collect_state("", expected);
  std::unordered_map<std::string, const Tensor*> given;
  for (const auto& [name, tensor] : state) {
    EMBER_CHECK(tensor.defined(), "{}.load_state_dict: the value of \"{}\" is an undefined tensor", type_name(),
                shown_text(name));
    EMBER_CHECK(given.emplace(name, &tensor).second,
                "{}.load_state_dict: \"{}\" appears twice in the state dict; which value to load is unclear",
                type_name(), shown_text(name));
  }
  // Note [Parameter slots]: tied names share one tensor, so a file that
  // holds only one of them (Hugging Face drops the others) fills them all,
  // as safetensors.torch.load_model does.
  std::map<AliasKey, std::vector<std::string>> aliases;
  for (const auto& [name, target] : expected) aliases[alias_key(target)].push_back(name);
  auto loaded_through_alias = [&](const Tensor& target) {
    for (const std::string& alias : aliases[alias_key(target)])
      if (given.count(alias)) return true;
    return false;
  };
  // A BatchNorm's num_batches_tracked that the state lacks keeps the module's
  // own count, as PyTorch 2's _BatchNorm._load_from_state_dict fills it for
  // dicts without version metadata (every safetensors file, older torchvision
  // checkpoints); strict loading refused them as missing. (PyTorch 1.13 and
  // ember before loaded 0: with momentum None the next batch's statistics
  // then replaced the running ones whole.)
  std::unordered_set<std::string> counts_of_batch_norms;
  for (const auto& [path, module] : named_modules())
    if (dynamic_cast<const BatchNorm*>(module) != nullptr)
      counts_of_batch_norms.insert(path.empty() ? "num_batches_tracked" : path + ".num_batches_tracked");
  LoadStateDictResult result;
  std::vector<std::string> mismatched;
  std::vector<std::pair<Tensor, const Tensor*>> copies;
  std::unordered_set<std::string> expected_names;
  for (const auto& [name, target] : expected) {
    expected_names.insert(name);
    auto found = given.find(name);
    if (found == given.end() && counts_of_batch_norms.contains(name)) {
      continue;
    } else if (found == given.end()) {
      if (!loaded_through_alias(target)) result.missing_keys.push_back(name);
    } else if (found->second->shape() != target.shape()) {
      mismatched.push_back(fmt::format("size mismatch for {}: copying a param with shape {} from checkpoint, the "
                                       "shape in current model is {}.",
                                       name, found->second->shape().str(), target.shape().str()));
    } else {
      copies.emplace_back(target, found->second);
    }
  }
  for (const auto& entry : state)
    if (!expected_names.count(entry.first)) result.unexpected_keys.push_back(entry.first);

  // Unexpected keys come from a file (nn::load): escaped, as every name read from one (core/shown_text.h).
  auto quoted_list = [](const std::vector<std::string>& keys) {
    std::string out;
    for (const std::string& key : keys) out += (out.empty() ? "\"" : ", \"") + shown_text(key) + "\"";
    return out;
  };
  std::string errors;
  if (strict && !result.missing_keys.empty()) errors += "\n\tMissing key(s) in state_dict: " + quoted_list(result.missing_keys) + ".";
  if (strict && !result.unexpected_keys.empty())
    errors += "\n\tUnexpected key(s) in state_dict: " + quoted_list(result.unexpected_keys) + ".";
  for (const std::string& line : mismatched) errors += "\n\t" + line;
  EMBER_CHECK(errors.empty(), "load_state_dict: Error(s) in loading state_dict for {}:{}", type_name(), errors);

  NoGradGuard no_grad;
  for (const auto& [target, source] : copies) copy_(target, *source);
  return result;
}

std::ostream& operator<<(std::ostream& stream, const Module& module) { return stream << module.str(); }

std::string python_repr(bool value) { return value ? "True" : "False"; }

std::string python_repr(double value) {
  // fmt's shortest round-trip form matches Python's repr (1e-05, 0.1) except
  // that Python marks integral floats with ".0".
  std::string text = fmt::format("{}", value);
  if (text.find_first_not_of("-0123456789") == std::string::npos) text += ".0";
  return text;
}

std::string python_tuple(std::span<const int64_t> values) {
  std::string out = "(";
  for (size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + std::to_string(values[i]);
  return out + (values.size() == 1 ? ",)" : ")");
}

}  // namespace ember::nn
