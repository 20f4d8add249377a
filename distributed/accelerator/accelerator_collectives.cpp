// Accelerator's collectives for user code: gather, gather_for_metrics, reduce,
// pad_across_processes, broadcast, wait_for_everyone and the process-first
// guards, over the job's group (identity with one process). Every call that
// moves data first agrees on the tensors' shapes and dtypes, so a mismatch is
// an error naming each process's tensor instead of a hang or garbage.
#include <exception>

#include "core/ops/creation.h"
#include "core/ops/indexing.h"
#include "core/ops/views.h"
#include "distributed/accelerator/accelerator.h"
#include "distributed/accelerator/accelerator_state.h"

namespace ember {
namespace {

// One process's tensor as a fixed-size row: ndim, dtype, then the sizes.
Tensor describe(const Tensor& tensor) {
  std::vector<int64_t> row(size_t(2 + kMaxDims), -1);
  row[0] = tensor.dim();
  row[1] = int64_t(tensor.dtype());
  for (int d = 0; d < tensor.dim(); ++d) row[size_t(2 + d)] = tensor.size(d);
  return from_vector(row);
}

// Every process's description, as rows of describe()'s.
std::vector<std::vector<int64_t>> describe_all(distributed::ProcessGroup& group, const Tensor& tensor) {
  Tensor mine = describe(tensor);
  Tensor all = empty({group.size(), mine.numel()}, {.dtype = DType::i64});
  group.allgather(all, mine)->wait();
  std::vector<int64_t> flat = all.to_vector<int64_t>();
  std::vector<std::vector<int64_t>> rows;
  for (int r = 0; r < group.size(); ++r)
    rows.emplace_back(flat.begin() + r * mine.numel(), flat.begin() + (r + 1) * mine.numel());
  return rows;
}

std::string describe_text(const std::vector<int64_t>& row) {
  Shape shape;
  for (int64_t d = 0; d < row[0]; ++d) shape.push_back(row[size_t(2 + d)]);
  return fmt::format("{} {}", shape, DType(row[1]));
}

// Throws, listing every process's tensor, unless `same(row_0, row_r)` for every r.
template <class Same>
void check_agreement(const std::vector<std::vector<int64_t>>& rows, const char* op, std::string_view what, Same same) {
  bool agree = true;
  for (const auto& row : rows) agree = agree && same(rows[0], row);
  if (agree) return;
  std::string listing;
  for (size_t r = 0; r < rows.size(); ++r)
    listing += fmt::format("{}process {}: {}", r ? ", " : "", r, describe_text(rows[r]));
  EMBER_CHECK(false, "Accelerator::{}: the processes' tensors must have {} ({})", op, what, listing);
}

distributed::ReduceOp reduce_op(std::string_view reduction) {
  if (reduction == "sum") return distributed::ReduceOp::sum;
  if (reduction == "mean") return distributed::ReduceOp::avg;
  if (reduction == "max") return distributed::ReduceOp::max;
  if (reduction == "min") return distributed::ReduceOp::min;
  EMBER_CHECK(false, "Accelerator::reduce: unknown reduction '{}' (use sum, mean, max or min)", reduction);
  return distributed::ReduceOp::sum;
}

}  // namespace

namespace detail {

void run_on_every_process(AcceleratorState& state, const char* op, const std::function<void()>& work) {
  std::exception_ptr error;
  try {
    work();
  } catch (...) {
    error = std::current_exception();
  }
  if (state.group) {
    std::vector<int32_t> failed(size_t(state.num_processes), 0);
    failed[size_t(state.process_index)] = error ? 1 : 0;
    Tensor flags = from_vector(failed);
    try {
      state.group->allreduce(flags, distributed::ReduceOp::sum)->wait();
    } catch (const Error& lost) {
      // A process died or stopped in the middle (a kill during save_state):
      // its own error comes first if this process had one, else say which
      // operation this was, not only which collective.
      if (error) std::rethrow_exception(error);
      EMBER_CHECK(false, "Accelerator::{}: the processes could not tell each other whether they succeeded: {}", op,
                  lost.what());
    }
    failed = flags.to_vector<int32_t>();
    if (!error) {
      std::vector<int> ranks;
      for (int r = 0; r < state.num_processes; ++r)
        if (failed[size_t(r)]) ranks.push_back(r);
      EMBER_CHECK(ranks.empty(), "Accelerator::{}: process {} failed (its own error says why)", op,
                  fmt::join(ranks, ", "));
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace detail

Tensor Accelerator::gather(const Tensor& tensor) {
  EMBER_CHECK(tensor.defined(), "Accelerator::gather: the tensor is undefined");
  Tensor rows = tensor.dim() == 0 ? tensor.reshape({1}) : tensor;
  distributed::ProcessGroup* group = state_->group;
  if (!group) return rows;
  check_agreement(describe_all(*group, rows), "gather", "the same shape and dtype",
                  [](const auto& a, const auto& b) { return a == b; });
  Shape shape = rows.shape();
  shape[0] *= group->size();
  Tensor output = empty(shape, {.dtype = rows.dtype(), .device = rows.device()});
  group->allgather(output, rows.contiguous())->wait();
  return output;
}

Tensor Accelerator::gather_for_metrics(const Tensor& tensor) {
  Tensor gathered = gather(tensor);
  // Note [Sharding a data loader]: even_batches completed the last round with
  // recycled samples, which sit at the end of the gathered last batches.
  const detail::PreparedLoader* loader = state_->gradient.active_loader();
  if (loader && loader->at_last_batch && loader->sharded && loader->sharded->num_padded() > 0) {
    const int64_t padded = loader->sharded->num_padded();
    EMBER_CHECK(padded <= gathered.size(0),
                "Accelerator::gather_for_metrics: the last batches hold {} rows in all, fewer than the {} recycled "
                "samples to drop; gather tensors whose dim 0 is the batch",
                gathered.size(0), padded);
    gathered = gathered.narrow(0, 0, gathered.size(0) - padded);
  }
  return gathered;
}

Tensor Accelerator::reduce(const Tensor& tensor, std::string_view reduction) {
  EMBER_CHECK(tensor.defined(), "Accelerator::reduce: the tensor is undefined");
  const distributed::ReduceOp op = reduce_op(reduction);
  // Checked on one process too, so that a script fails where it is written.
  EMBER_CHECK(op != distributed::ReduceOp::avg || is_floating(tensor.dtype()),
              "Accelerator::reduce: \"mean\" needs a floating tensor, got {} {}; reduce with \"sum\" and divide",
              tensor.dtype(), tensor.shape());
  distributed::ProcessGroup* group = state_->group;
  if (!group) return tensor.clone();
  check_agreement(describe_all(*group, tensor), "reduce", "the same shape and dtype",
                  [](const auto& a, const auto& b) { return a == b; });
  Tensor result = tensor.contiguous().clone();
  group->allreduce(result, op)->wait();
  return result;
}

Tensor Accelerator::pad_across_processes(const Tensor& tensor, int64_t dim, double pad_value, bool pad_first) {
  EMBER_CHECK(tensor.defined(), "Accelerator::pad_across_processes: the tensor is undefined");
  EMBER_CHECK(tensor.dim() > 0, "Accelerator::pad_across_processes: needs a tensor with a dim, got a 0-d one");
  EMBER_CHECK(dim >= -tensor.dim() && dim < tensor.dim(),
              "Accelerator::pad_across_processes: dim {} is out of range for shape {}", dim, tensor.shape());
  if (dim < 0) dim += tensor.dim();
  distributed::ProcessGroup* group = state_->group;
  if (!group) return tensor;
  const auto rows = describe_all(*group, tensor);
  check_agreement(rows, "pad_across_processes", "the same dtype and sizes except along dim " + std::to_string(dim),
                  [dim](const auto& a, const auto& b) {
                    for (size_t i = 0; i < a.size(); ++i)
                      if (i != size_t(2 + dim) && a[i] != b[i]) return false;
                    return true;
                  });
  int64_t largest = 0;
  for (const auto& row : rows) largest = std::max(largest, row[size_t(2 + dim)]);
  const int64_t missing = largest - tensor.size(dim);
  if (missing == 0) return tensor;
  // pad() lists (before, after) pairs from the last dim backwards.
  std::vector<int64_t> amounts(size_t(2 * (tensor.dim() - dim)), 0);
  amounts[size_t(2 * (tensor.dim() - 1 - dim) + (pad_first ? 0 : 1))] = missing;
  return pad(tensor, amounts, pad_value);
}

Tensor Accelerator::broadcast(const Tensor& tensor, int from_process) {
  EMBER_CHECK(tensor.defined(), "Accelerator::broadcast: the tensor is undefined");
  EMBER_CHECK(from_process >= 0 && from_process < num_processes(),
              "Accelerator::broadcast: from_process {} is not a process index (there are {})", from_process,
              num_processes());
  distributed::ProcessGroup* group = state_->group;
  if (!group) return tensor;
  check_agreement(describe_all(*group, tensor), "broadcast", "the same shape and dtype",
                  [](const auto& a, const auto& b) { return a == b; });
  Tensor result = tensor.contiguous().clone();
  group->broadcast(result, from_process)->wait();
  return result;
}

void Accelerator::wait_for_everyone() {
  if (state_->group) state_->group->barrier()->wait();
}

Accelerator::ProcessFirstGuard::ProcessFirstGuard(Accelerator& accelerator, bool first)
    : accelerator_(accelerator), first_(first) {
  if (!first_) accelerator_.wait_for_everyone();
}

Accelerator::ProcessFirstGuard::~ProcessFirstGuard() noexcept(false) {
  // While an exception unwinds, the others may never arrive: do not wait for them.
  if (first_ && std::uncaught_exceptions() == 0) accelerator_.wait_for_everyone();
}

std::pair<int64_t, int64_t> Accelerator::share_of(int64_t count) const {
  const int64_t processes = num_processes(), rank = process_index();
  const int64_t base = count / processes, extra = count % processes;
  const int64_t begin = rank * base + std::min(rank, extra);
  return {begin, begin + base + (rank < extra ? 1 : 0)};
}

}  // namespace ember
