// Reducer: DistributedDataParallel's bucketer. It owns flat gradient buckets
// (each parameter's .grad is a view into one, Note [Gradients as bucket
// views]), is fed by the parameters' post-accumulate-grad hooks, launches a
// bucket's all-reduce (an average) as soon as the bucket and every bucket
// before it are complete (Note [Bucket order]), and at the end of backward
// waits for them (Note [End of backward]). The notes are in distributed/README.md.
// Called by distributed_data_parallel.cpp; tests: tests/distributed/test_ddp.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/named_tensors.h"
#include "core/tensor.h"
#include "distributed/process_group.h"

namespace ember::distributed {

// The gradients of some parameters of one dtype and device, back to back in
// one buffer: one all-reduce per bucket instead of one per parameter.
struct Bucket {
  DType dtype = DType::f32;
  Tensor buffer;                   // 1-D, contiguous: where the all-reduce writes the average
  // With a compressing comm hook: what travels, buffer's elements in the
  // hook's dtype (Note [Compressed gradients]); undefined otherwise.
  Tensor compressed;
  std::vector<size_t> parameters;  // indices into Reducer::parameters(), in fill order
  std::vector<int64_t> offsets;    // where each parameter's gradient starts in buffer (elements)
  std::vector<int64_t> lengths;    // and its number of elements
  std::vector<Tensor> views;       // buffer[offset, offset + length) shaped like the parameter

  // This iteration's state.
  std::vector<Tensor> inputs;  // each slot's gradient where backward left it: what the all-reduce reads
  size_t pending = 0;          // parameters not ready yet
  std::shared_ptr<Work> work;
  int64_t launched_ns = 0;  // profiler clock
  bool done_logged = false;
};

struct ReducerOptions {
  int64_t bucket_cap_bytes = int64_t(25) << 20;
  // The cap of the first bucket of each dtype and device (at most
  // bucket_cap_bytes), small so its all-reduce starts early (Note [Bucket order]).
  int64_t first_bucket_cap_bytes = int64_t(1) << 20;
  // Also all-reduce which parameters each rank used, so that a parameter no
  // rank used keeps .grad undefined as PyTorch does (Note [Unused parameters]).
  bool find_unused_parameters = false;
  // The dtype floating gradients travel in (Note [Compressed gradients]);
  // none: their own.
  std::optional<DType> compress_to = std::nullopt;
};

class Reducer {
 public:
  // `parameters` (registration order) must be the same list on every rank.
  // While a profile records distributed events, each bucket's readiness and
  // all-reduce are on its timeline (Note [Bucket events on the timeline]).
  Reducer(NamedTensors parameters, ProcessGroup& group, ReducerOptions options);
  ~Reducer();  // waits for launched all-reduces (they write into the buckets)
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // A synced forward ran: the coming backward must make every parameter ready
  // once. Those in `unused` (indices, found by walking the graph) are ready at
  // its first gradient. A prepared reduction that no gradient reached (its
  // forward's output was never backpropagated) is replaced, as PyTorch's
  // reducer re-prepares; one that a backward began must have finished.
  void prepare_for_backward(const std::vector<size_t>& unused);
  // A forward ran under no_sync: its backward accumulates into .grad and
  // communicates nothing, until the next prepared backward.
  void allow_local_accumulation() { accumulating_ = true; }
  // From parameter `index`'s post-accumulate hook: its .grad was just written.
  // When a backward is expected, marks it ready: the bucket's all-reduce reads
  // .grad where it is, and the end of backward makes .grad the bucket view
  // holding the average (Note [Reducing into a bucket]). Under no_sync,
  // copies it into the bucket view to accumulate there.
  // A gradient that neither a prepared backward nor a no_sync forward
  // announced comes from a forward that skipped the module's hooks: an error
  // (Note [Forwards that skip the hooks]).
  void on_gradient(size_t index);
  // Whether a backward began the prepared reduction (a gradient arrived)
  // and has not finished it: PyTorch's require_finalize_.
  bool reduction_unfinished() const;
  // The names of the parameters a pending reduction is still waiting for.
  std::vector<std::string> unready_parameters() const;

  // Waits for launched all-reduces, ignoring their errors (for destructors).
  void wait_outstanding() noexcept;
  // Makes every .grad that is a bucket view a standalone copy, so nothing
  // aliases the buckets any more.
  void detach_gradients();

  const NamedTensors& parameters() const { return parameters_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }
  // Which bucket, and which slot in it, holds parameter i's gradient.
  struct Location {
    size_t bucket = 0;
    size_t slot = 0;
  };
  const std::vector<Location>& locations() const { return locations_; }

 private:
  void assign_buckets(int64_t first_bucket_cap_bytes, int64_t bucket_cap_bytes);
  // Makes .grad the bucket view, copying a gradient that lives elsewhere into
  // it. An undefined .grad stays undefined, unless `zero_if_none`: then it
  // becomes the zeroed view.
  void adopt_gradient(size_t index, bool zero_if_none);
  void mark_ready(size_t index);
  // The parameters the forward found unused: ready with their gradient (zero if none).
  void mark_unused_ready();
  void launch_in_order();
  // The bucket's all-reduce; with compression, casts its gradients first.
  std::shared_ptr<Work> launch(Bucket& bucket);
  void finalize();
  void log_completed(bool wait);

  NamedTensors parameters_;
  ProcessGroup& group_;
  ReducerOptions options_;
  bool profiling_ = false;  // this iteration records bucket events
  std::vector<Bucket> buckets_;
  std::vector<Location> locations_;

  bool expecting_ = false;
  bool accumulating_ = false;  // a no_sync forward ran since the last prepared one
  // Per parameter: a no_sync backward gave it a gradient since the last
  // prepared forward (PyTorch's local_used_map carries these into the sync).
  std::vector<bool> used_under_no_sync_;
  int64_t iteration_ = 0;  // synced forwards so far
  std::vector<bool> ready_;
  size_t next_launch_ = 0;  // buckets before it were launched this iteration
  // When the latest gradient reached its hook: at finalize, the moment
  // backward had computed every gradient (the trace's "last gradient").
  int64_t last_gradient_ns_ = 0;
  // find_unused_parameters: 1 per parameter this rank used, summed over ranks.
  Tensor used_;
  std::shared_ptr<Work> used_work_;
  std::vector<bool> had_no_grad_;  // unused here and .grad undefined before this iteration
  std::vector<size_t> unused_to_mark_;  // found unused by the forward, marked at backward's first gradient
};

}  // namespace ember::distributed
