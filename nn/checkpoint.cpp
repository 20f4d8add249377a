// Activation checkpointing's core (checkpoint.h): the frame of one
// checkpointed call, the placeholders its nodes keep instead of saved
// tensors, and the recomputation that fills them. Note [Activation
// checkpointing] in nn/README.md. Tests: tests/nn/test_checkpoint.cpp.
#include "nn/checkpoint.h"

#include <array>
#include <optional>

#include "autograd/saved_tensor_hooks.h"
#include "core/autocast.h"
#include "core/random_uses.h"

namespace ember::nn::detail {
namespace {

class Frame;

// What a node of a checkpointed region keeps of a tensor it saved: where the
// recomputation puts the values, and what they must look like. The node owns
// it, so the recomputed values are freed when the engine frees that node's
// saved tensors, one node at a time, as the unchecked ones would be.
class Placeholder final : public autograd::PackedTensor {
 public:
  Placeholder(std::shared_ptr<Frame> frame, size_t index, const Tensor& saved)
      : frame_(std::move(frame)), index_(index), shape_(saved.shape()), dtype_(saved.dtype()),
        device_(saved.device()) {}
  Tensor unpack() override;
  // Called by the recomputation with the tensor its run saved in this place.
  void fill(const Tensor& saved, const std::string& name);
  void release() { values_ = Tensor(); }

 private:
  std::shared_ptr<Frame> frame_;
  size_t index_;
  Shape shape_;
  DType dtype_;
  Device device_;
  Tensor values_;
};

// One checkpointed call: how to run it again, and in which state.
class Frame {
 public:
  Frame(std::string name, std::function<void()> replay) : name_(std::move(name)), replay_(std::move(replay)) {}

  const std::string& name() const { return name_; }

  // Before the region runs: the arguments' versions and the autocast policy,
  // which the recomputation must find again.
  void record_state(std::span<Tensor* const> inputs) {
    for (Tensor* input : inputs) {
      inputs_.push_back(*input);
      versions_.push_back(input->version());
    }
    for (int device = 0; device < kNumDeviceTypes; ++device) {
      autocast_enabled_[size_t(device)] = is_autocast_enabled(DeviceType(device));
      autocast_dtype_[size_t(device)] = autocast_dtype(DeviceType(device));
    }
  }

  // After the region ran: the generators it drew from, with their states
  // before; and a function that changed its own arguments would start its
  // second run from other values.
  void finish_forward(std::vector<GeneratorUse> generators) {
    generators_ = std::move(generators);
    for (const std::weak_ptr<Placeholder>& held : placeholders_)
      if (std::shared_ptr<Placeholder> placeholder = held.lock()) placeholder->release();
    for (size_t i = 0; i < inputs_.size(); ++i)
      EMBER_CHECK(inputs_[i].version() == versions_[i],
                  "{}: the function modified its argument tensor {} (shape {}) in place, so running it again in "
                  "backward would start from other values; clone the argument inside the function first",
                  name_, i, inputs_[i].shape());
  }

  // The pack hook of the forward: a new placeholder per saved tensor.
  std::shared_ptr<autograd::PackedTensor> pack(const std::shared_ptr<Frame>& self, const Tensor& saved) {
    auto placeholder = std::make_shared<Placeholder>(self, placeholders_.size(), saved);
    // Until the region's forward ends, a backward inside it (autograd::grad
    // of its own outputs: a gradient penalty) reads the saved tensors
    // themselves, as PyTorch 2's checkpoint does; finish_forward drops them.
    // It recomputed instead, from a region only partly run, and failed.
    placeholder->fill(saved, name_);
    placeholders_.push_back(placeholder);
    return placeholder;
  }

  // Runs the region again with grad mode on, with the generators it drew
  // from and the autocast policy as they were in the forward, and hands the
  // i-th tensor it saves to placeholder i.
  void recompute() {
    EMBER_CHECK(!recomputing_,
                "{}: running the function again needed a tensor saved by that same run (a backward inside the "
                "checkpointed function?)",
                name_);
    for (size_t i = 0; i < inputs_.size(); ++i)
      EMBER_CHECK(inputs_[i].version() == versions_[i],
                  "{}: argument tensor {} (shape {}) was modified in place after the checkpointed forward (version "
                  "{} then, {} now); backward would recompute from the new values. Modify a clone instead",
                  name_, i, inputs_[i].shape(), versions_[i], inputs_[i].version());
    struct Restore {  // the generators' current states and this flag, even if the run throws
      Frame& frame;
      std::vector<GeneratorUse> now;
      ~Restore() {
        for (const GeneratorUse& use : now) use.generator->set_state(use.before);
        frame.recomputing_ = false;
      }
    } restore{*this, {}};
    for (const GeneratorUse& use : generators_) {
      restore.now.push_back({use.generator, use.generator->state()});
      use.generator->set_state(use.before);
    }
    recomputing_ = true;
    GeneratorUsesHidden hidden;
    EnableGradGuard grad_mode;  // the engine runs formulas without recording; this run must record
    // The engine turned autocast off; the forward's policy comes back, device by device.
    std::array<std::optional<AutocastGuard>, kNumDeviceTypes> autocast;
    for (int device = 0; device < kNumDeviceTypes; ++device)
      autocast[size_t(device)].emplace(DeviceType(device), autocast_dtype_[size_t(device)],
                                       autocast_enabled_[size_t(device)]);
    size_t count = 0;
    autograd::SavedTensorHooksGuard collect([&](const Tensor& saved) -> std::shared_ptr<autograd::PackedTensor> {
      size_t index = count++;
      if (index < placeholders_.size())
        if (std::shared_ptr<Placeholder> placeholder = placeholders_[index].lock()) placeholder->fill(saved, name_);
      return nullptr;  // this run's own graph keeps it too, until the run's result is dropped below
    });
    replay_();
    EMBER_CHECK(count == placeholders_.size(),
                "{}: running the function again in backward saved {} tensors for backward where the forward saved "
                "{}: it must run the same operations both times (same control flow, the same arguments requiring "
                "grad)",
                name_, count, placeholders_.size());
  }

 private:
  std::string name_;
  std::function<void()> replay_;
  std::vector<Tensor> inputs_;
  std::vector<uint64_t> versions_;
  std::vector<GeneratorUse> generators_;  // each generator the region drew from, and its state before
  std::array<bool, kNumDeviceTypes> autocast_enabled_{};
  std::array<DType, kNumDeviceTypes> autocast_dtype_{};
  std::vector<std::weak_ptr<Placeholder>> placeholders_;  // those still held by a node
  bool recomputing_ = false;
};

Tensor Placeholder::unpack() {
  if (!values_.defined()) frame_->recompute();
  EMBER_CHECK(values_.defined(), "{}: saved tensor {} was not recomputed", frame_->name(), index_);
  return values_;
}

void Placeholder::fill(const Tensor& saved, const std::string& name) {
  EMBER_CHECK(saved.shape() == shape_ && saved.dtype() == dtype_ && saved.device() == device_,
              "{}: running the function again in backward saved, as tensor {}, one of shape {}, dtype {} on {} where "
              "the forward saved one of shape {}, dtype {} on {}: it must compute the same both times",
              name, index_, saved.shape(), saved.dtype(), saved.device(), shape_, dtype_, device_);
  values_ = saved.detach();
}

}  // namespace

void run_checkpointed(std::string name, std::span<Tensor* const> inputs, std::function<void()> replay,
                      const std::function<void()>& region) {
  auto frame = std::make_shared<Frame>(std::move(name), std::move(replay));
  frame->record_state(inputs);
  GeneratorUseRecorder generators;
  {
    autograd::SavedTensorHooksGuard pack([frame](const Tensor& saved) { return frame->pack(frame, saved); });
    region();
  }
  frame->finish_forward(generators.uses());
}

}  // namespace ember::nn::detail
