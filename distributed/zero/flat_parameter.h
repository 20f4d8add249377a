// FlatParameter: the parameters of one sharding unit (and one dtype) laid
// back to back in one buffer, padded to a multiple of the group size and cut
// into equal shards, shard r belonging to rank r (Note [Flat shards] in
// distributed/README.md). Each parameter tensor becomes a view into the full
// buffer; each rank's optimizer updates the rank's piece of every parameter
// (`pieces`), a view into its shard. Under ZeRO-3 the full buffer's memory is
// released between uses and all-gathered from the shards before them.
// Used by sharded_data_parallel.cpp; tests: tests/distributed/test_zero.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "distributed/process_group.h"

namespace ember::distributed {

class FlatParameter {
 public:
  // Lays out `parameters` (same dtype and device, rank 0's values already
  // everywhere) and re-points each at its place in the full buffer. With
  // `sharded_parameters` (ZeRO-3) the shard gets memory of its own and the
  // full buffer is released until gather().
  // While a profile records distributed events, each collective is a span on
  // its communication track named after `unit`, with the bytes it moved. With `replicas` (hybrid
  // sharding), `group` is this node's processes, which shard, and the
  // reduced gradient shard is then averaged over `replicas`, the processes
  // holding the same shard on the other nodes.
  FlatParameter(std::vector<std::string> names, std::vector<Tensor> parameters, ProcessGroup& group,
                bool sharded_parameters, std::string unit = "",
                ProcessGroup* replicas = nullptr);
  ~FlatParameter();  // waits for collectives in flight (they write into its buffers)
  FlatParameter(const FlatParameter&) = delete;
  FlatParameter& operator=(const FlatParameter&) = delete;

  const std::vector<std::string>& names() const { return names_; }
  const std::string& unit() const { return unit_; }  // the unit's module path, "" for the root
  const std::vector<Tensor>& parameters() const { return parameters_; }
  // Where parameter i starts in the full buffer, and its length (elements).
  int64_t offset(size_t i) const { return offsets_[i]; }
  int64_t numel(size_t i) const { return parameters_[i].numel(); }
  int64_t total_numel() const { return total_; }  // without padding
  int64_t shard_numel() const { return shard_; }
  // This rank's piece of parameter i: [piece_begin, piece_begin + piece.numel())
  // of its flattened elements; a 1-D leaf whose data is in the shard.
  const Tensor& piece(size_t i) const { return pieces_[i]; }
  int64_t piece_begin(size_t i) const { return piece_begins_[i]; }
  // Where piece i starts in the shard.
  int64_t piece_shard_offset(size_t i) const;
  const Tensor& shard() const { return shard_data_; }
  // Every rank's `shard_like` (shard_numel() elements) back to back, as the
  // full buffer's layout: how optimizer state is made whole.
  Tensor all_gather_shaped(const Tensor& shard_like) const;

  // --- Parameters (ZeRO-3): all-gather the shards into the full buffer -------
  bool sharded_parameters() const { return sharded_parameters_; }
  // Starts the all-gather unless the full parameters are there or coming.
  void start_gather();
  // Waits for it (starting it first if needed): the parameters are readable.
  void gather();
  bool gathered() const { return state_ == State::gathered; }
  // Releases the full buffer's memory (ZeRO-3 only; the shard stays).
  void release();
  // ZeRO-1/2: all-gathers every rank's updated shard into the full buffer
  // (the optimizer wrote only this rank's pieces).
  void refresh_after_step();
  // After the full parameters were written (loading a state dict), keeps
  // this rank's shard of them (ZeRO-3; ZeRO-1/2's shard is a view already).
  void keep_shard_of_full();

  // --- Gradients -------------------------------------------------------------
  // Copies the parameters' gradients (zero where undefined) into a flat
  // buffer and starts its reduction: a reduce-scatter into this rank's shard,
  // or with `keep_full_gradients` (ZeRO-1) an all-reduce of the whole buffer,
  // whose views become the parameters' .grad again. Under ZeRO-2/3 the
  // parameters' .grad are dropped: the shard holds what the step needs.
  // Also sums over ranks which parameters had a gradient.
  void launch_reduction(bool keep_full_gradients);
  bool reduction_in_flight() const { return reduce_work_ != nullptr; }
  // Waits for it, divides by the group size and adds the result to the
  // accumulated gradient shard.
  void finish_reduction();
  // The pieces' .grad become views of the accumulated shard (only those of
  // parameters some rank had a gradient for; the others stay undefined,
  // so the optimizer skips them as DDP's would).
  void publish_piece_gradients();
  // Forgets the accumulated gradients (the optimizer's zero_grad); without
  // `set_to_none` they become zeros, so every piece that had a gradient takes
  // part in the next step.
  void clear_gradients(bool set_to_none);
  bool has_gradients() const { return grad_shard_.defined(); }
  // Multiplies every gradient held here by `factor`: the accumulated shard
  // and what backwards under no_sync added to the parameters' .grad since
  // (the fp16 loss scale changed under them). No reduction may be in flight.
  void scale_gradients_(double factor);
  // The accumulated, averaged gradient shard (clipping scales it in place).
  Tensor& gradient_shard() { return grad_shard_; }

  // What this rank holds now, in bytes.
  int64_t parameter_bytes() const;
  int64_t gradient_bytes() const;

 private:
  enum class State { released, gathering, gathered };
  // A span on the profiler's communication track from `begin_ns` to now.
  void log_collective(const char* op, int64_t begin_ns, int64_t bytes) const;

  std::vector<std::string> names_;
  std::vector<Tensor> parameters_;
  ProcessGroup& group_;
  ProcessGroup* replicas_;
  bool sharded_parameters_;
  std::string unit_;
  int64_t gather_began_ = 0, reduce_began_ = 0;  // profiler clock
  std::vector<int64_t> offsets_;
  int64_t total_ = 0;
  int64_t shard_ = 0;
  Tensor full_;        // [shard_ * group size]: the parameters' storage
  Tensor shard_data_;  // [shard_]: a view of full_, or (ZeRO-3) memory of its own
  std::vector<Tensor> pieces_;
  std::vector<int64_t> piece_begins_;
  State state_ = State::gathered;
  std::shared_ptr<Work> gather_work_;

  Tensor grad_flat_;     // the reduction's input (ZeRO-1: also its output)
  Tensor grad_reduced_;  // the reduce-scatter's output
  Tensor used_;          // per parameter: on how many ranks it had a gradient
  std::shared_ptr<Work> reduce_work_;
  std::shared_ptr<Work> used_work_;
  bool reduced_full_ = false;
  Tensor grad_shard_;             // accumulated, averaged; undefined after clear_gradients
  std::vector<bool> ever_used_;  // since clear_gradients, on any rank
};

}  // namespace ember::distributed
