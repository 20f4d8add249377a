// The bucketer behind DistributedDataParallel (see reducer.h). Everything here
// runs on the thread that runs forward and backward; the all-reduces run on
// the process group's communication thread, in the order we launch them.
#include "distributed/ddp/reducer.h"

#include <algorithm>
#include <utility>
#include <cstdio>
#include <map>
#include <set>

#include "core/error.h"
#include "core/grad_hook.h"
#include "core/ops/creation.h"
#include "core/ops/elementwise.h"
#include "core/ops/views.h"
#include "core/profiler/profiler.h"

namespace ember::distributed {

namespace {

nlohmann::json bucket_args(const Bucket& bucket, size_t index, const NamedTensors& parameters) {
  nlohmann::json names = nlohmann::json::array();
  for (size_t parameter : bucket.parameters) names.push_back(parameters[parameter].first);
  return {{"bucket", index},
          {"numel", bucket.buffer.numel()},
          {"bytes", bucket.buffer.nbytes()},
          {"dtype", dtype_name(bucket.dtype)},
          {"parameters", std::move(names)}};
}

// Note [Buckets in symmetric memory]: a CPU bucket lives in memory that
// every rank maps (ProcessGroup::empty_symmetric), so that the shm backend
// reduces it reading the peers' buckets where they lie. Where the backend has
// none (gloo) it is ordinary memory, and so it is on every rank where
// /dev/shm has no room for it (rank 0 decides), with a word from rank 0.
Tensor bucket_buffer(ProcessGroup& group, int64_t numel, DType dtype, Device device) {
  if (!device.is_cpu()) return zeros({numel}, {.dtype = dtype, .device = device});
  Tensor buffer = group.empty_symmetric({numel}, dtype);
  buffer.fill_(Scalar(0.0));
  if (group.rank() == 0 && group.backend_name() == "shm" && group.size() > 1 && !group.is_symmetric(buffer))
    std::fprintf(stderr,
                 "DistributedDataParallel: warning: /dev/shm has no room for a gradient bucket of %lld bytes on each of "
                 "%d ranks, so it is ordinary memory and its all-reduce copies twice as much; give the container more "
                 "(docker run --shm-size=1g)\n",
                 static_cast<long long>(buffer.nbytes()), group.size());
  return buffer;
}

}  // namespace

Reducer::Reducer(NamedTensors parameters, ProcessGroup& group, ReducerOptions options)
    : parameters_(std::move(parameters)), group_(group), options_(options) {
  EMBER_CHECK(options.bucket_cap_bytes > 0, "DistributedDataParallel: bucket_cap_mb must be positive, got {} bytes",
              options.bucket_cap_bytes);
  EMBER_CHECK(options.first_bucket_cap_bytes > 0,
              "DistributedDataParallel: first_bucket_cap_mb must be positive, got {} bytes",
              options.first_bucket_cap_bytes);
  ready_.assign(parameters_.size(), false);
  had_no_grad_.assign(parameters_.size(), false);
  assign_buckets(std::min(options.first_bucket_cap_bytes, options.bucket_cap_bytes), options.bucket_cap_bytes);
}

Reducer::~Reducer() { wait_outstanding(); }

// Note [Bucket order]: parameters go into buckets in reverse registration
// order, since backward produces gradients roughly in reverse of the forward,
// which mostly follows registration: bucket 0 (the last layers) fills first
// and its all-reduce overlaps the rest of backward (Note [What overlap buys]
// in examples/ladder/README.md: what that saves per step). The first bucket
// of each dtype and device closes at first_bucket_cap_bytes (1 MiB, as
// PyTorch's), so that its all-reduce starts after the last layers' gradients.
void Reducer::assign_buckets(int64_t first_bucket_cap_bytes, int64_t bucket_cap_bytes) {
  std::map<std::pair<int, std::string>, size_t> open;  // (dtype, device) -> the bucket being filled
  std::set<std::pair<int, std::string>> closed_one;    // keys whose first bucket is closed
  std::vector<int64_t> bytes;
  locations_.resize(parameters_.size());
  for (size_t i = parameters_.size(); i-- > 0;) {
    const auto& [name, parameter] = parameters_[i];
    auto key = std::pair{int(parameter.dtype()), parameter.device().str()};
    auto found = open.find(key);
    if (found == open.end()) {
      found = open.emplace(key, buckets_.size()).first;
      buckets_.emplace_back();
      buckets_.back().dtype = parameter.dtype();
      bytes.push_back(0);
    }
    size_t index = found->second;
    Bucket& bucket = buckets_[index];
    int64_t offset = bucket.offsets.empty() ? 0 : bucket.offsets.back() + bucket.lengths.back();
    locations_[i] = {index, bucket.parameters.size()};
    bucket.parameters.push_back(i);
    bucket.offsets.push_back(offset);
    bucket.lengths.push_back(parameter.numel());
    bytes[index] += parameter.nbytes();
    // A parameter larger than the cap gets a bucket of its own.
    if (bytes[index] >= (closed_one.count(key) ? bucket_cap_bytes : first_bucket_cap_bytes)) {
      open.erase(found);
      closed_one.insert(key);
    }
  }

  // Note [Gradients as bucket views]: allocate each buffer and make every
  // existing .grad a view into it (keeping its values).
  NoGradGuard no_grad;
  for (Bucket& bucket : buckets_) {
    const Tensor& first = parameters_[bucket.parameters.front()].second;
    int64_t numel = bucket.offsets.back() + bucket.lengths.back();
    bucket.buffer = options_.compress_to ? zeros({numel}, {.dtype = bucket.dtype, .device = first.device()})
                                         : bucket_buffer(group_, numel, bucket.dtype, first.device());
    if (options_.compress_to && is_floating(bucket.dtype) && bucket.dtype != *options_.compress_to)
      bucket.compressed = zeros({numel}, {.dtype = *options_.compress_to, .device = first.device()});
    for (size_t slot = 0; slot < bucket.parameters.size(); ++slot) {
      const Tensor& parameter = parameters_[bucket.parameters[slot]].second;
      Tensor flat = bucket.buffer.narrow(0, bucket.offsets[slot], bucket.lengths[slot]);
      bucket.views.push_back(flat.view(parameter.shape()));
      adopt_gradient(bucket.parameters[slot], /*zero_if_none=*/false);
    }
  }
}

void Reducer::adopt_gradient(size_t index, bool zero_if_none) {
  const Tensor& parameter = parameters_[index].second;
  const Location& at = locations_[index];
  Tensor& view = buckets_[at.bucket].views[at.slot];
  Tensor grad = parameter.grad();
  // An undefined .grad stays so (as PyTorch's) until backward writes one.
  if (grad.is_same(view) || (!grad.defined() && !zero_if_none)) return;
  // After zero_grad(set_to_none) AccumulateGrad wrote a fresh tensor; it holds
  // the whole gradient, so it replaces (not adds to) the view's contents.
  NoGradGuard no_grad;
  if (grad.defined()) {
    copy_(view, grad);
  } else {
    view.fill_(0);
  }
  parameter.set_grad(view);
}

bool Reducer::reduction_unfinished() const {
  return expecting_ && std::find(ready_.begin(), ready_.end(), true) != ready_.end();
}

void Reducer::prepare_for_backward(const std::vector<size_t>& unused) {
  EMBER_ASSERT(!reduction_unfinished(), "prepare_for_backward while a backward's reduction is unfinished");
  // The replaced reduction launched nothing but, with find_unused_parameters,
  // the used-map all-reduce, which every rank's forward launched alike.
  if (used_work_) std::exchange(used_work_, nullptr)->wait();
  expecting_ = true;
  accumulating_ = false;
  ++iteration_;
  profiling_ = profiler::recording(profiler::kRecordDistributed);
  last_gradient_ns_ = profiler::now_ns();  // in case no gradient comes (every parameter unused)
  ready_.assign(parameters_.size(), false);
  had_no_grad_.assign(parameters_.size(), false);
  next_launch_ = 0;
  for (Bucket& bucket : buckets_) {
    bucket.inputs.assign(bucket.parameters.size(), Tensor());
    bucket.pending = bucket.parameters.size();
    bucket.work = nullptr;
    bucket.done_logged = false;
  }
  if (options_.find_unused_parameters) {
    // Launched before any bucket, so it has the same place in every rank's
    // sequence of collectives.
    // A parameter this forward left out but a no_sync micro-batch of this
    // step used counts as used: its accumulated gradient is averaged. Counted
    // unused, the ranks that had no gradient of it dropped the averaged one
    // at the end while the others kept it, and the replicas drifted apart.
    used_ = ones({int64_t(parameters_.size())}, {.dtype = DType::i32});
    int32_t* used = used_.data_ptr<int32_t>();
    for (size_t index : unused) used[index] = used_under_no_sync_.empty() ? 0 : int32_t(used_under_no_sync_[index]);
    if (group_.size() > 1) used_work_ = group_.allreduce(used_, ReduceOp::sum);
  }
  used_under_no_sync_.clear();
  // Note [Unused parameters]: ready with a zero gradient (or the one
  // accumulated under no_sync), so that their buckets still complete; at
  // backward's first gradient, as PyTorch's, not here: a zero_grad between
  // the forward and the backward would leave them last step's gradient.
  // When nothing is used there is no backward to wait for.
  unused_to_mark_ = unused;
  if (unused.size() == parameters_.size()) mark_unused_ready();
}

void Reducer::mark_unused_ready() {
  const std::vector<size_t> unused = std::move(unused_to_mark_);
  unused_to_mark_.clear();
  for (size_t index : unused) {
    had_no_grad_[index] = !parameters_[index].second.grad().defined();
    adopt_gradient(index, /*zero_if_none=*/true);
    mark_ready(index);
  }
}

void Reducer::on_gradient(size_t index) {
  if (profiling_) last_gradient_ns_ = profiler::now_ns();
  // Under no_sync gradients only accumulate in the views.
  if (accumulating_ && !expecting_) {
    if (used_under_no_sync_.empty()) used_under_no_sync_.assign(parameters_.size(), false);
    used_under_no_sync_[index] = true;
    return adopt_gradient(index, /*zero_if_none=*/false);
  }
  // Note [Forwards that skip the hooks]: training on would step on this
  // rank's own gradient while the others step on theirs.
  EMBER_CHECK(expecting_,
              "DistributedDataParallel: parameter \"{}\" got a gradient from a backward that no call of the model "
              "prepared, so it would not be averaged across the {} ranks and the replicas would diverge. Either the "
              "forward ran without the module's hooks (call the model as model(...) instead of model.forward(...); a module "
              "whose forward takes other arguments gets a call operator from nn::Module::call, nn/README.md Note "
              "[Module calls]), or a second backward ran through one forward (call the model again first)",
              parameters_[index].first, group_.size());
  EMBER_CHECK(!ready_[index],
              "DistributedDataParallel: parameter \"{}\" got a gradient twice in one iteration (a second backward "
              "through the same forward, or a parameter find_unused_parameters found unused that got a gradient "
              "from outside the module's output); call the module again before each backward",
              parameters_[index].first);
  if (!unused_to_mark_.empty()) mark_unused_ready();
  EMBER_CHECK(!ready_[index],
              "DistributedDataParallel: parameter \"{}\" was found unused by the forward but got a gradient from "
              "outside the module's output; call the module again before each backward",
              parameters_[index].first);
  if (profiling_) log_completed(/*wait=*/false);
  mark_ready(index);
}

void Reducer::mark_ready(size_t index) {
  ready_[index] = true;
  const Location& at = locations_[index];
  Bucket& bucket = buckets_[at.bucket];
  const Tensor& parameter = parameters_[index].second;
  const Tensor& grad = parameter.grad();
  EMBER_ASSERT(grad.defined() && grad.numel() == bucket.lengths[at.slot], "parameter {}'s gradient does not fit its slot",
               parameters_[index].first);
  // Module::to after wrapping converts each .grad in place, so the bucket's
  // views stop aliasing the bucket: with a comm hook the step then took the
  // gradient frozen at the conversion, every step after, without a word.
  EMBER_CHECK(parameter.dtype() == bucket.buffer.dtype() && grad.dtype() == bucket.buffer.dtype() &&
                  parameter.device() == bucket.buffer.device(),
              "DistributedDataParallel: parameter \"{}\" is {} on {} (gradient {}), but was {} on {} when "
              "DistributedDataParallel was built (Module::to after wrapping?); convert the model before wrapping it, "
              "or build DistributedDataParallel again",
              parameters_[index].first, parameter.dtype(), parameter.device(), grad.dtype(), bucket.buffer.dtype(),
              bucket.buffer.device());
  bucket.inputs[at.slot] = grad;
  EMBER_ASSERT(bucket.pending > 0, "bucket {} has no pending parameter", at.bucket);
  if (--bucket.pending > 0) return;
  if (profiling_)
    profiler::record_instant(profiler::kRecordDistributed, profiler::Category::bucket,
                             fmt::format("bucket {} ready", at.bucket),
                             {{"bucket", at.bucket}, {"iteration", iteration_}}, profiler::Track::communication);
  launch_in_order();
}

// Note [Bucket order]: a complete bucket waits until every bucket before it
// has launched, so every rank issues the same all-reduces in the same order
// even when gradients arrive in a different order on different ranks.
void Reducer::launch_in_order() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    Bucket& bucket = buckets_[next_launch_];
    bucket.launched_ns = profiler::now_ns();
    bucket.work = launch(bucket);
    ++next_launch_;
  }
  if (next_launch_ == buckets_.size()) finalize();
}

std::shared_ptr<Work> Reducer::launch(Bucket& bucket) {
  // Note [End of backward]: avg, so the backend divides as it writes the
  // sums (shm: in its reduce pass) and the buffer needs no pass of its own.
  // Note [Reducing into a bucket]: the gradients are read where they are.
  if (!bucket.compressed.defined()) return group_.allreduce_into(bucket.buffer, bucket.inputs, ReduceOp::avg);
  // Note [Compressed gradients]: cast, then divide (as PyTorch's hooks: the
  // sum of the shares cannot overflow where the gradients did not), then sum.
  NoGradGuard no_grad;
  for (size_t slot = 0; slot < bucket.inputs.size(); ++slot)
    copy_(bucket.compressed.narrow(0, bucket.offsets[slot], bucket.lengths[slot]), bucket.inputs[slot].reshape({-1}));
  mul_(bucket.compressed, Scalar(1.0 / double(group_.size())));
  return group_.allreduce(bucket.compressed, ReduceOp::sum);
}

// Note [End of backward]: the last parameter's hook launched the last bucket;
// still inside that hook (so before backward() returns), wait for every
// all-reduce (each an average). The optimizer step that follows sees
// averaged gradients without any call from the user.
void Reducer::finalize() {
  expecting_ = false;
  // The end of backward's own work, apart from the wait below that the last
  // AccumulateGrad's span includes: what the overlap test compares the
  // launches with.
  if (profiling_)
    profiler::record_span(profiler::kRecordDistributed, profiler::Category::bucket, "last gradient",
                          last_gradient_ns_, last_gradient_ns_, {{"iteration", iteration_}});
  log_completed(/*wait=*/true);
  NoGradGuard no_grad;
  for (Bucket& bucket : buckets_) {
    if (bucket.compressed.defined()) copy_(bucket.buffer, bucket.compressed);
    for (size_t slot = 0; slot < bucket.parameters.size(); ++slot)
      parameters_[bucket.parameters[slot]].second.set_grad(bucket.views[slot]);
    bucket.inputs.assign(bucket.parameters.size(), Tensor());
  }
  if (used_work_) {
    std::shared_ptr<Work> work = std::move(used_work_);
    work->wait();
  }
  if (options_.find_unused_parameters) {
    // Note [Unused parameters]: a parameter no rank used keeps the undefined .grad it had.
    const int32_t* used = used_.data_ptr<int32_t>();
    for (size_t index = 0; index < parameters_.size(); ++index)
      if (used[index] == 0 && had_no_grad_[index]) parameters_[index].second.set_grad(Tensor());
  }
}

// Stamps the end of each launched all-reduce: when it is seen complete (a
// poll between backward nodes, so the stamp is late by at most one node), or,
// with `wait`, when waiting for it returns.
void Reducer::log_completed(bool wait) {
  for (size_t index = 0; index < next_launch_; ++index) {
    Bucket& bucket = buckets_[index];
    if (bucket.done_logged) continue;
    if (bucket.work) {
      if (wait) {
        // Cleared first: if the wait throws, the destructor must not wait again.
        std::shared_ptr<Work> work = std::move(bucket.work);
        work->wait();
      } else if (!bucket.work->is_completed()) {
        continue;
      }
      bucket.work = nullptr;
    }
    bucket.done_logged = true;
    if (profiling_) {
      nlohmann::json args = bucket_args(bucket, index, parameters_);
      args["iteration"] = iteration_;
      profiler::record_span(profiler::kRecordDistributed, profiler::Category::bucket,
                            fmt::format("allreduce bucket {}", index), bucket.launched_ns, profiler::now_ns(),
                            std::move(args), profiler::Track::communication);
    }
  }
}

std::vector<std::string> Reducer::unready_parameters() const {
  std::vector<std::string> names;
  for (size_t index = 0; index < parameters_.size(); ++index)
    if (!ready_[index]) names.push_back(parameters_[index].first);
  return names;
}

void Reducer::wait_outstanding() noexcept {
  std::vector<std::shared_ptr<Work>> works;
  for (Bucket& bucket : buckets_)
    if (bucket.work) works.push_back(std::move(bucket.work));
  if (used_work_) works.push_back(std::move(used_work_));
  for (const auto& work : works) {
    try {
      work->wait();
    } catch (const std::exception& error) {
      std::fprintf(stderr, "DistributedDataParallel: an all-reduce failed while shutting down: %s\n", error.what());
    }
  }
}

void Reducer::detach_gradients() {
  NoGradGuard no_grad;
  for (size_t index = 0; index < parameters_.size(); ++index) {
    const Location& at = locations_[index];
    const Tensor& parameter = parameters_[index].second;
    if (parameter.grad().is_same(buckets_[at.bucket].views[at.slot]))
      parameter.set_grad(buckets_[at.bucket].views[at.slot].clone());
  }
}

}  // namespace ember::distributed
