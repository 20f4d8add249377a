// FlatParameter (see flat_parameter.h): layout, gathering and reduction of
// one unit's flat buffer.
#include "distributed/zero/flat_parameter.h"

#include <algorithm>

#include "core/error.h"
#include "core/grad_hook.h"
#include "core/ops/creation.h"
#include "core/ops/elementwise.h"
#include "core/ops/views.h"
#include "core/profiler/profiler.h"
#include "core/shape.h"

namespace ember::distributed {
namespace {

// The same memory as `tensor` (1-D, contiguous) under a storage object of its
// own. The all-gather writes through it, so the version counter the
// parameters share does not move: autograd checks that counter for the
// weights it saved in forward, and refilling released memory with the same
// values is not a modification (PyTorch's FSDP preserves the counter too).
Tensor unversioned_alias(const Tensor& tensor) {
  auto alias = std::make_shared<Storage>(tensor.data_ptr(), tensor.nbytes(), tensor.device(), [](void*) {});
  return Tensor::make(std::move(alias), tensor.dtype(), tensor.shape(), {1}, 0);
}

}  // namespace

FlatParameter::FlatParameter(std::vector<std::string> names, std::vector<Tensor> parameters, ProcessGroup& group,
                             bool sharded_parameters, std::string unit, ProcessGroup* replicas)
    : names_(std::move(names)), parameters_(std::move(parameters)), group_(group), replicas_(replicas),
      sharded_parameters_(sharded_parameters), unit_(std::move(unit)) {
  EMBER_ASSERT(!parameters_.empty() && names_.size() == parameters_.size(), "a FlatParameter needs parameters");
  const Tensor& first = parameters_.front();
  for (const Tensor& parameter : parameters_) {
    offsets_.push_back(total_);
    total_ += parameter.numel();
  }
  const int64_t size = group_.size();
  const int64_t rank = group_.rank();
  shard_ = (total_ + size - 1) / size;
  full_ = zeros({shard_ * size}, {.dtype = first.dtype(), .device = first.device()});

  // Each parameter becomes a contiguous view of its place in full_, keeping
  // its TensorImpl: the model, the optimizer and any tie see the same tensor.
  NoGradGuard no_grad;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    Tensor& parameter = parameters_[i];
    copy_(full_.narrow(0, offsets_[i], parameter.numel()).view(parameter.shape()), parameter);
    TensorImpl& impl = *parameter.impl();
    impl.storage = full_.storage();
    impl.offset = full_.impl()->offset + offsets_[i];
    impl.strides = contiguous_strides(impl.shape, "FlatParameter");
    impl.contiguous = true;
  }
  shard_data_ = full_.narrow(0, rank * shard_, shard_);
  if (sharded_parameters_) {
    shard_data_ = shard_data_.clone();
    full_.storage()->release();
    state_ = State::released;
  }

  // The optimizer's stand-ins: the part of each parameter inside this rank's shard.
  const int64_t shard_begin = rank * shard_;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const int64_t begin = std::max(offsets_[i], shard_begin);
    const int64_t end = std::min(offsets_[i] + parameters_[i].numel(), shard_begin + shard_);
    Tensor piece = end > begin ? shard_data_.narrow(0, begin - shard_begin, end - begin) : shard_data_.narrow(0, 0, 0);
    piece.requires_grad_(true);
    pieces_.push_back(piece);
    piece_begins_.push_back(end > begin ? begin - offsets_[i] : 0);
  }
  ever_used_.assign(parameters_.size(), false);
}

FlatParameter::~FlatParameter() {
  for (std::shared_ptr<Work>* work : {&gather_work_, &reduce_work_, &used_work_}) {
    if (!*work) continue;
    try {
      (*work)->wait();
    } catch (const Error&) {  // the job is failing already; its first error is what gets reported
    }
  }
}

void FlatParameter::start_gather() {
  if (!sharded_parameters_ || state_ != State::released) return;
  full_.storage()->reallocate();
  gather_began_ = profiler::now_ns();
  gather_work_ = group_.allgather(unversioned_alias(full_), shard_data_);
  state_ = State::gathering;
}

void FlatParameter::log_collective(const char* op, int64_t begin_ns, int64_t bytes) const {
  if (!profiler::recording(profiler::kRecordDistributed)) return;
  profiler::record_span(profiler::kRecordDistributed, profiler::Category::bucket,
                        fmt::format("{} {}", op, unit_.empty() ? "(root)" : unit_), begin_ns, profiler::now_ns(),
                        {{"op", op}, {"unit", unit_}, {"bytes", bytes}, {"ranks", group_.size()}},
                        profiler::Track::communication);
}

void FlatParameter::gather() {
  start_gather();
  if (state_ != State::gathering) return;
  std::shared_ptr<Work> work = std::move(gather_work_);
  work->wait();
  state_ = State::gathered;
  log_collective("all_gather", gather_began_, full_.nbytes());
}

void FlatParameter::release() {
  if (!sharded_parameters_ || state_ == State::released) return;
  if (state_ == State::gathering) gather();
  full_.storage()->release();
  state_ = State::released;
}

void FlatParameter::refresh_after_step() {
  EMBER_ASSERT(!sharded_parameters_, "refresh_after_step is for ZeRO-1/2");
  if (group_.size() == 1) return;
  // Its own copy: block rank() of the output is the input's place.
  Tensor mine = shard_data_.clone();
  const auto began = profiler::now_ns();
  group_.allgather(full_, mine)->wait();
  log_collective("all_gather_updated", began, full_.nbytes());
}

void FlatParameter::launch_reduction(bool keep_full_gradients) {
  EMBER_ASSERT(reduce_work_ == nullptr, "a reduction is already in flight");
  NoGradGuard no_grad;
  const Device device = full_.device();
  grad_flat_ = zeros({full_.numel()}, {.dtype = full_.dtype(), .device = device});
  std::vector<float> used(parameters_.size(), 0.0f);
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const Tensor& parameter = parameters_[i];
    Tensor slot = grad_flat_.narrow(0, offsets_[i], parameter.numel()).view(parameter.shape());
    if (Tensor grad = parameter.grad(); grad.defined()) {
      copy_(slot, grad);
      used[i] = 1;
    }
    // ZeRO-1 keeps full gradients, as DDP's bucket views; ZeRO-2/3 drop them.
    parameter.set_grad(keep_full_gradients ? slot : Tensor());
  }
  used_ = from_vector(used, {int64_t(used.size())}).to(device);
  reduced_full_ = keep_full_gradients;
  reduce_began_ = profiler::now_ns();
  // The average is folded into the reduction (the shm backend divides as it
  // adds; NCCL natively), not a second pass over the gradients.
  if (keep_full_gradients) {
    reduce_work_ = group_.allreduce(grad_flat_, ReduceOp::avg);
  } else {
    grad_reduced_ = empty({shard_}, {.dtype = full_.dtype(), .device = device});
    reduce_work_ = group_.reduce_scatter(grad_reduced_, grad_flat_, ReduceOp::avg);
  }
  used_work_ = group_.allreduce(used_, ReduceOp::sum);
}

void FlatParameter::finish_reduction() {
  if (!reduce_work_) return;
  std::shared_ptr<Work> reduce = std::move(reduce_work_);
  std::shared_ptr<Work> used = std::move(used_work_);
  reduce->wait();
  used->wait();
  log_collective(reduced_full_ ? "all_reduce" : "reduce_scatter", reduce_began_, grad_flat_.nbytes());
  if (replicas_ != nullptr && replicas_->size() > 1) {
    // Hybrid: the same shard on the other nodes holds their nodes' averages
    // (every node has as many ranks, so the average of those is the mean over all).
    const auto began = profiler::now_ns();
    replicas_->allreduce(grad_reduced_, ReduceOp::avg)->wait();
    replicas_->allreduce(used_, ReduceOp::sum)->wait();
    log_collective("all_reduce_replicas", began, grad_reduced_.nbytes());
  }
  NoGradGuard no_grad;
  if (reduced_full_) {
    // The parameters' .grad are views of grad_flat_ and accumulate into it,
    // so it already holds the earlier micro-batches' (equal) averages.
    grad_shard_ = grad_flat_.narrow(0, group_.rank() * shard_, shard_);
  } else {
    if (grad_shard_.defined()) {
      add_(grad_shard_, grad_reduced_);
    } else {
      grad_shard_ = grad_reduced_;
    }
    grad_reduced_ = Tensor();
    grad_flat_ = Tensor();
  }
  std::vector<float> counts = used_.to(kCPU).to_vector<float>();
  for (size_t i = 0; i < counts.size(); ++i) ever_used_[i] = ever_used_[i] || counts[i] > 0;
  // ZeRO-1 handed every parameter its slot of the reduced buffer. One that
  // no rank used keeps no gradient, as under DDP's find_unused_parameters:
  // a zero one would be decayed by an optimizer left out of prepare.
  if (reduced_full_)
    for (size_t i = 0; i < parameters_.size(); ++i)
      if (!ever_used_[i]) parameters_[i].set_grad(Tensor());
}

void FlatParameter::publish_piece_gradients() {
  const int64_t shard_begin = group_.rank() * shard_;
  for (size_t i = 0; i < pieces_.size(); ++i) {
    const Tensor& piece = pieces_[i];
    if (!grad_shard_.defined() || !ever_used_[i] || piece.numel() == 0) {
      piece.set_grad(Tensor());
      continue;
    }
    piece.set_grad(grad_shard_.narrow(0, offsets_[i] + piece_begins_[i] - shard_begin, piece.numel()));
  }
}

void FlatParameter::scale_gradients_(double factor) {
  EMBER_ASSERT(reduce_work_ == nullptr, "scale_gradients_ while a reduction of {} is in flight", unit_);
  NoGradGuard no_grad;
  if (reduced_full_ && grad_flat_.defined()) {
    // ZeRO-1: the shard and the parameters' .grad are all views of grad_flat_.
    mul_(grad_flat_, Scalar(factor));
    return;
  }
  if (grad_shard_.defined()) mul_(grad_shard_, Scalar(factor));
  for (const Tensor& parameter : parameters_)
    if (Tensor grad = parameter.grad(); grad.defined()) mul_(grad, Scalar(factor));
}

void FlatParameter::clear_gradients(bool set_to_none) {
  grad_shard_ = set_to_none ? Tensor() : zeros({shard_}, {.dtype = full_.dtype(), .device = full_.device()});
  grad_flat_ = Tensor();
  // Without set_to_none a parameter that had a gradient keeps a zero one, and
  // one that never had any still has none (PyTorch's zero_grad(False) on a
  // None gradient), so ever_used_ stays as it is.
  if (set_to_none) ever_used_.assign(parameters_.size(), false);
  for (const Tensor& piece : pieces_) piece.set_grad(Tensor());
  for (const Tensor& parameter : parameters_) parameter.set_grad(Tensor());
}

int64_t FlatParameter::piece_shard_offset(size_t i) const {
  return offsets_[i] + piece_begins_[i] - group_.rank() * shard_;
}

Tensor FlatParameter::all_gather_shaped(const Tensor& shard_like) const {
  EMBER_ASSERT(shard_like.numel() == shard_, "all_gather_shaped takes a shard's worth of elements");
  Tensor full = empty({full_.numel()}, {.dtype = shard_like.dtype(), .device = shard_like.device()});
  if (group_.size() == 1) {
    copy_(full, shard_like);
    return full;
  }
  group_.allgather(full, shard_like.contiguous())->wait();
  return full;
}

void FlatParameter::keep_shard_of_full() {
  if (!sharded_parameters_) return;
  NoGradGuard no_grad;
  copy_(shard_data_, full_.narrow(0, group_.rank() * shard_, shard_));
}

int64_t FlatParameter::parameter_bytes() const {
  const int64_t full = full_.numel() * int64_t(element_size(full_.dtype()));
  if (!sharded_parameters_) return full;
  return shard_data_.nbytes() + (state_ == State::released ? 0 : full);
}

int64_t FlatParameter::gradient_bytes() const {
  // ZeRO-1: the full buffer, which the shard and the parameters' .grad view.
  if (reduced_full_ && grad_flat_.defined()) return grad_flat_.nbytes();
  int64_t bytes = grad_shard_.defined() ? grad_shard_.nbytes() : 0;
  if (grad_flat_.defined()) bytes += grad_flat_.nbytes();
  for (const Tensor& parameter : parameters_)
    if (Tensor grad = parameter.grad(); grad.defined()) bytes += grad.nbytes();
  return bytes;
}

}  // namespace ember::distributed
