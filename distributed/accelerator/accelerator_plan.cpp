// See accelerator_plan.h. The bytes of a collective are those of the buffer it
// reduces or gathers in full (a DDP bucket, a ZeRO unit's padded flat
// parameter), as the trace records them; what a process sends over the wire
// is a fraction of it, given once at the end.
#include "distributed/accelerator/accelerator_plan.h"

#include <fmt/format.h>

#include "distributed/zero/memory_estimate.h"

namespace ember::detail {

namespace {

constexpr const char* kPrefix = "ember Accelerator: ";

std::string collective(const std::string& op, const std::string& what, int64_t bytes, int per_step,
                       const char* when) {
  return fmt::format("{}  {} of {}: {} bytes, {} per step{}", kPrefix, op, what, bytes, per_step, when);
}

// DDP: one all-reduce per bucket (Note [Bucket order]).
void ddp_plan(const distributed::DistributedDataParallel& ddp, std::vector<std::string>& lines, int64_t& total) {
  const std::vector<distributed::Bucket>& buckets = ddp.reducer().buckets();
  for (size_t index = 0; index < buckets.size(); ++index) {
    const distributed::Bucket& bucket = buckets[index];
    const int64_t bytes = (bucket.compressed.defined() ? bucket.compressed : bucket.buffer).nbytes();
    lines.push_back(collective("all_reduce", fmt::format("bucket {}", index), bytes, 1, " (during backward)"));
    total += bytes;
  }
}

// ZeRO: per unit (Note [ZeRO stages]). zero1 all-reduces the full gradients
// and zero2 reduce-scatters them, both all-gather the updated shards after
// the step; zero3 all-gathers a unit before its forward and again before its
// backward (the root unit stays gathered from its forward to the end of
// backward: once), and reduce-scatters its gradients.
void zero_plan(const distributed::ShardedDataParallel& zero, std::vector<std::string>& lines, int64_t& total) {
  using distributed::ShardingStrategy;
  const ShardingStrategy strategy = zero.strategy();
  const int64_t shard_ranks = zero.shard_group().size();
  for (const auto& flat : zero.flat_parameters()) {
    const int64_t element = element_size(flat->shard().dtype());
    const int64_t bytes = flat->shard_numel() * shard_ranks * element;  // the padded full buffer
    const std::string unit = fmt::format("unit \"{}\"", flat->unit().empty() ? "(root)" : flat->unit());
    auto add = [&](const char* op, int64_t size, int per_step, const char* when) {
      lines.push_back(collective(op, unit, size, per_step, when));
      total += size * per_step;
    };
    if (strategy == ShardingStrategy::zero1 || strategy == ShardingStrategy::zero2) {
      add(strategy == ShardingStrategy::zero1 ? "all_reduce" : "reduce_scatter", bytes, 1, " (during backward)");
      add("all_gather_updated", bytes, 1, " (after the optimizer step)");
      continue;
    }
    add("all_gather", bytes, flat->unit().empty() ? 1 : 2, flat->unit().empty() ? " (before forward)"
                                                                               : " (before forward and before backward)");
    add("reduce_scatter", bytes, 1, " (during backward)");
    const int64_t replicas = zero.group().size() / shard_ranks;
    if (replicas > 1) add("all_reduce_replicas", flat->shard_numel() * element, 1, " (across nodes)");
  }
}

std::string bytes_of(const distributed::MemoryEstimate& estimate) {
  std::string text = fmt::format("parameters {} bytes, gradients {} bytes, optimizer state {} bytes",
                                 estimate.parameters, estimate.gradients, estimate.optimizer_state);
  if (estimate.transient > 0) text += fmt::format(", and {} bytes more while the largest unit runs", estimate.transient);
  return text;
}

}  // namespace

std::vector<std::string> communication_plan(const PreparedModel& model, int num_processes) {
  if (!model.ddp && !model.zero) return {};
  const std::string strategy = model.ddp ? "ddp" : std::string(distributed::to_string(model.zero->strategy()));
  std::vector<std::string> lines = {fmt::format("{}each step of the {} ({} on {} processes) communicates:", kPrefix,
                                                model.module->type_name(), strategy, num_processes)};
  int64_t total = 0;
  if (model.ddp) ddp_plan(*model.ddp, lines, total);
  if (model.zero) zero_plan(*model.zero, lines, total);
  // A ring all-reduce sends 2(n-1)/n of its buffer from each process, a
  // reduce-scatter or an all-gather (n-1)/n (the collectives' notes).
  lines.push_back(fmt::format("{}  {} bytes of collectives per step; each process sends (n-1)/n of each all-gather "
                              "and reduce-scatter, 2(n-1)/n of each all-reduce, with n = {}",
                              kPrefix, total, num_processes));
  return lines;
}

std::vector<std::string> memory_plan(const optim::Optimizer& optimizer, int64_t largest_unit_params,
                                     distributed::ShardingStrategy strategy, int num_processes,
                                     int processes_per_node, std::optional<DType> autocast_dtype) {
  int64_t num_params = 0;
  DType dtype = DType::f32;
  for (size_t group = 0; group < optimizer.num_param_groups(); ++group)
    for (const Tensor& parameter : optimizer.params(group)) {
      num_params += parameter.numel();
      dtype = parameter.dtype();
    }
  const int buffers = optimizer.num_param_groups() == 0 ? 0 : int(optimizer.state_buffer_names(0).size());
  distributed::MemoryEstimateOptions options{.num_params = num_params,
                                             .largest_unit_params = largest_unit_params,
                                             .dtype = dtype,
                                             .autocast_dtype = autocast_dtype,
                                             .optimizer_buffers = buffers,
                                             .strategy = strategy,
                                             .world_size = num_processes,
                                             .processes_per_node = processes_per_node};
  std::vector<std::string> lines = {
      fmt::format("{}each process holds for the {} optimizer ({} parameters of {}, {} state buffer{} each) under {}: {}",
                  kPrefix, optimizer.name(), num_params, dtype_name(dtype), buffers, buffers == 1 ? "" : "s",
                  distributed::to_string(strategy), bytes_of(distributed::estimate_memory(options)))};
  std::string others;
  for (distributed::ShardingStrategy other : {distributed::ShardingStrategy::ddp, distributed::ShardingStrategy::zero1,
                                              distributed::ShardingStrategy::zero2, distributed::ShardingStrategy::zero3}) {
    options.strategy = other;
    others += fmt::format("{}{} {}", others.empty() ? "" : ", ", distributed::to_string(other),
                          distributed::estimate_memory(options).total());
  }
  lines.push_back(fmt::format("{}  in all, in bytes: {} (Note [ZeRO stages])", kPrefix, others));
  return lines;
}

}  // namespace ember::detail
