// Scenarios of the reference collectives (distributed/backends/reference/),
// run by tests/distributed/test_reference_collectives.cpp through `ember launch`:
//   reference_bit_for_bit  every algorithm, called directly on a shm
//       transport (a few cases on a Gloo one too), against the production
//       backends (shm as the world group, Gloo as a subgroup) and against its
//       own documented reduction order
//   reference_ddp  DDP trained over backend "reference" (the all-reduce that
//       EMBER_REFERENCE_ALLREDUCE names) against the same training over shm
//   reference_accelerator <backend>  an Accelerator training loop on a
//       default group of `backend`; prints a digest of the final parameters,
//       which the test compares between "reference" and "shm"
// Two kinds of floating-point comparison, kept apart on purpose:
//  * "production": inputs are small integers, so every sum, max, min and
//    product is exact in every dtype (bf16 included) whatever the order, and
//    an algorithm must give shm's and Gloo's bits exactly. The naive
//    all-reduce reduces in rank order as shm does for f32 and f64, so it is
//    also compared with shm on non-integer values.
//  * "order": inputs are non-integer, so the bits depend on the order of a
//    sum; each algorithm must equal a sum computed here, one element at a
//    time with reduce_host_buffers, in the order its file documents.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <ember/ember.h>
#include <fmt/format.h>

#include "distributed/accelerator/accelerator.h"
#include "distributed/backends/reference/reference_collectives.h"
#include "distributed/ddp/distributed_data_parallel.h"
#include "distributed/process_group.h"
#include "workers/scenario.h"

namespace ember::test {
namespace {

namespace dist = ember::distributed;
namespace ref = ember::distributed::reference;
using Bytes = std::vector<std::byte>;

constexpr ref::AllreduceAlgorithm kAlgorithms[] = {ref::AllreduceAlgorithm::naive, ref::AllreduceAlgorithm::ring,
                                                   ref::AllreduceAlgorithm::halving_doubling};

// Rank q's input element i: a small integer (exact everywhere) or, with
// `fractional`, a value with a full mantissa. Products get factors in {-1, 1, 2}.
double input_value(int q, int64_t i, int salt, bool fractional, dist::ReduceOp op) {
  if (op == dist::ReduceOp::product) return (q + i + salt) % 3 == 0 ? -1.0 : double((q + i + salt) % 3);
  if (fractional) return std::sin(double(q * 7919 + i * 104729 + salt)) * 3.7;
  return double((q * 5 + i * 3 + salt) % 9 - 4);
}

Bytes input_bytes(DType dtype, int q, int64_t count, int salt, bool fractional, dist::ReduceOp op) {
  std::vector<double> values;
  for (int64_t i = 0; i < count; ++i) values.push_back(input_value(q, i, salt, fractional, op));
  Tensor t = from_vector(values, Shape{count}).to(dtype);
  const auto* first = static_cast<const std::byte*>(t.data_ptr());
  return Bytes(first, first + count * element_size(dtype));
}

Tensor as_tensor(const Bytes& bytes, DType dtype) {
  Tensor t = make_tensor(Shape{int64_t(bytes.size()) / element_size(dtype)}, dtype);
  if (!bytes.empty()) std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  return t;
}

Bytes as_bytes(const Tensor& t) {
  const auto* first = static_cast<const std::byte*>(t.data_ptr());
  return Bytes(first, first + t.numel() * element_size(t.dtype()));
}

// Element i of the reduction of `inputs` (one per rank), folding ranks in `order`.
void fold(std::byte* out, const std::vector<Bytes>& inputs, const std::vector<int>& order, int64_t i, DType dtype,
          dist::ReduceOp op) {
  const int64_t e = element_size(dtype);
  std::memcpy(out, inputs[size_t(order[0])].data() + i * e, size_t(e));
  for (size_t k = 1; k < order.size(); ++k)
    dist::reduce_host_buffers(out, out, inputs[size_t(order[k])].data() + i * e, 1, dtype, op);
}

// What `algorithm` gives for `inputs`, in the order its file documents.
Bytes documented_order(ref::AllreduceAlgorithm algorithm, const std::vector<Bytes>& inputs, int64_t count, DType dtype,
                       dist::ReduceOp op) {
  const int n = int(inputs.size());
  const int64_t e = element_size(dtype);
  Bytes out(inputs[0].size());
  if (algorithm == ref::AllreduceAlgorithm::naive) {  // rank order
    std::vector<int> order;
    for (int q = 0; q < n; ++q) order.push_back(q);
    for (int64_t i = 0; i < count; ++i) fold(out.data() + i * e, inputs, order, i, dtype, op);
  } else if (algorithm == ref::AllreduceAlgorithm::ring) {  // block b: from rank b+1 around to b
    // Worked out here, not taken from even_blocks: the first count % n blocks hold one element more.
    const int64_t small = count / n, larger = count % n;
    for (int64_t i = 0; i < count; ++i) {
      const int64_t b = i < larger * (small + 1) ? i / (small + 1) : larger + (i - larger * (small + 1)) / small;
      std::vector<int> order;
      for (int k = 1; k <= n; ++k) order.push_back(int((b + k) % n));
      fold(out.data() + i * e, inputs, order, i, dtype, op);
    }
  } else {  // a tree: folded pairs, then virtual ranks v and v ^ mask, mask from p/2 down
    int p = 1;
    while (p * 2 <= n) p *= 2;
    const int extra = n - p;
    for (int64_t i = 0; i < count; ++i) {
      std::vector<Bytes> partial(static_cast<size_t>(p), Bytes(static_cast<size_t>(e)));
      for (int v = 0; v < p; ++v)
        fold(partial[size_t(v)].data(), inputs, v < extra ? std::vector<int>{2 * v, 2 * v + 1} : std::vector<int>{v + extra},
             i, dtype, op);
      for (int mask = p / 2; mask >= 1; mask /= 2) {
        std::vector<Bytes> next = partial;
        for (int v = 0; v < p; ++v)
          dist::reduce_host_buffers(next[size_t(v)].data(), partial[size_t(v)].data(), partial[size_t(v ^ mask)].data(),
                                    1, dtype, op);
        partial = std::move(next);
      }
      std::memcpy(out.data() + i * e, partial[0].data(), size_t(e));
    }
  }
  return out;
}

struct Checks {
  int rank;
  int run = 0, failed = 0;
  void expect(bool ok, const std::string& what) {
    ++run;
    if (!ok && failed++ < 10) std::printf("rank %d FAILED: %s\n", rank, what.c_str());
  }
};

std::string describe(const char* what, DType dtype, dist::ReduceOp op, int64_t count) {
  return fmt::format("{} {} {} count {}", what, dtype_name(dtype), dist::reduce_op_name(op), count);
}

EMBER_SCENARIO(reference_bit_for_bit) {
  dist::ProcessGroup& shm = dist::init_process_group({.backend = "shm"});
  const int n = shm.size(), rank = shm.rank();
  std::vector<int> everyone;
  for (int q = 0; q < n; ++q) everyone.push_back(q);
  std::shared_ptr<dist::ProcessGroup> gloo = dist::new_group(everyone, "gloo");
  // The algorithms' transport: a shm backend of its own, on the world's store.
  dist::BackendContext context{.rank = rank, .size = n, .global_ranks = everyone, .store = shm.store(),
                               .store_prefix = shm.store_prefix() + "reference/", .timeout = shm.timeout(),
                               .advertise_address = ""};
  std::unique_ptr<dist::Backend> transport = dist::make_shm_backend(context);
  const ref::Peers peers{.transport = *transport, .rank = rank, .size = n};
  Checks check{.rank = rank};

  const std::vector<int64_t> counts = {1, 7, std::max<int64_t>(1, n - 1), n + 1, 1003};
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i64, DType::i32, DType::boolean})
    for (dist::ReduceOp op : {dist::ReduceOp::sum, dist::ReduceOp::max, dist::ReduceOp::min, dist::ReduceOp::product}) {
      if (!dist::host_reduction_supported(dtype, op)) continue;
      for (int64_t count : counts) {
        const Bytes mine = input_bytes(dtype, rank, count, 1, false, op);
        Tensor by_shm = as_tensor(mine, dtype), by_gloo = as_tensor(mine, dtype);
        shm.allreduce(by_shm, op)->wait();
        gloo->allreduce(by_gloo, op)->wait();
        check.expect(as_bytes(by_shm) == as_bytes(by_gloo), describe("shm and gloo agree:", dtype, op, count));
        for (ref::AllreduceAlgorithm algorithm : kAlgorithms) {
          Bytes data = mine;
          ref::allreduce(algorithm, peers, data.data(), count, dtype, op);
          check.expect(data == as_bytes(by_shm),
                       describe(ref::allreduce_algorithm_name(algorithm), dtype, op, count) + " equals shm and gloo");
        }
        // reduce_scatter: n blocks of `count`.
        const Bytes blocks = input_bytes(dtype, rank, n * count, 2, false, op);
        Tensor rs_shm = make_tensor(Shape{count}, dtype), rs_gloo = make_tensor(Shape{count}, dtype);
        shm.reduce_scatter(rs_shm, as_tensor(blocks, dtype), op)->wait();
        gloo->reduce_scatter(rs_gloo, as_tensor(blocks, dtype), op)->wait();
        Bytes rs(size_t(count * element_size(dtype)));
        ref::ring_reduce_scatter(peers, blocks.data(), rs.data(), count, dtype, op);
        check.expect(rs == as_bytes(rs_shm) && rs == as_bytes(rs_gloo), describe("ring reduce_scatter", dtype, op, count));
      }
    }

  // all-gather and every root of the broadcast, on i32 elements (any bytes would do).
  for (int64_t count : {int64_t(1), int64_t(7), int64_t(n - 1), int64_t(1025)}) {
    if (count == 0) continue;
    const Bytes piece = input_bytes(DType::i32, rank, count, 3, false, dist::ReduceOp::sum);
    const int64_t nbytes = int64_t(piece.size());
    Tensor gathered_shm = make_tensor(Shape{n * count}, DType::i32), gathered_gloo = make_tensor(Shape{n * count}, DType::i32);
    shm.allgather(gathered_shm, as_tensor(piece, DType::i32))->wait();
    gloo->allgather(gathered_gloo, as_tensor(piece, DType::i32))->wait();
    Bytes gathered(size_t(n * nbytes));
    ref::ring_allgather(peers, piece.data(), gathered.data(), nbytes);
    check.expect(gathered == as_bytes(gathered_shm) && gathered == as_bytes(gathered_gloo),
                 fmt::format("ring allgather of {} elements", count));
    for (int root = 0; root < n; ++root) {
      Tensor by_shm = as_tensor(piece, DType::i32), by_gloo = as_tensor(piece, DType::i32);
      shm.broadcast(by_shm, root)->wait();
      gloo->broadcast(by_gloo, root)->wait();
      Bytes data = piece;
      ref::tree_broadcast(peers, data.data(), nbytes, root);
      check.expect(data == as_bytes(by_shm) && data == as_bytes(by_gloo),
                   fmt::format("tree broadcast of {} elements from root {}", count, root));
    }
  }

  // The same algorithms on Gloo's send/recv (the transport between hosts),
  // which copies its sends and waits for a recv only past 16 in flight.
  {
    dist::BackendContext gloo_context = context;
    gloo_context.store_prefix = shm.store_prefix() + "reference_gloo/";
    std::unique_ptr<dist::Backend> gloo_transport = dist::make_gloo_backend(gloo_context);
    const ref::Peers over_gloo{.transport = *gloo_transport, .rank = rank, .size = n};
    for (DType dtype : {DType::f32, DType::i64})
      for (int64_t count : {int64_t(1), int64_t(n + 1), int64_t(1003)}) {
        const dist::ReduceOp op = dtype == DType::f32 ? dist::ReduceOp::sum : dist::ReduceOp::max;
        const Bytes mine = input_bytes(dtype, rank, count, 5, false, op);
        Tensor by_shm = as_tensor(mine, dtype);
        shm.allreduce(by_shm, op)->wait();
        for (ref::AllreduceAlgorithm algorithm : kAlgorithms) {
          Bytes data = mine;
          ref::allreduce(algorithm, over_gloo, data.data(), count, dtype, op);
          check.expect(data == as_bytes(by_shm),
                       describe(ref::allreduce_algorithm_name(algorithm), dtype, op, count) + " over Gloo equals shm");
        }
        const Bytes blocks = input_bytes(dtype, rank, n * count, 6, false, op);
        Tensor rs_shm = make_tensor(Shape{count}, dtype);
        shm.reduce_scatter(rs_shm, as_tensor(blocks, dtype), op)->wait();
        Bytes rs(size_t(count * element_size(dtype))), gathered(size_t(n) * mine.size()), root_last = mine;
        ref::ring_reduce_scatter(over_gloo, blocks.data(), rs.data(), count, dtype, op);
        check.expect(rs == as_bytes(rs_shm), describe("ring reduce_scatter over Gloo", dtype, op, count));
        Tensor gathered_shm = make_tensor(Shape{n * count}, dtype), broadcast_shm = as_tensor(mine, dtype);
        shm.allgather(gathered_shm, as_tensor(mine, dtype))->wait();
        ref::ring_allgather(over_gloo, mine.data(), gathered.data(), int64_t(mine.size()));
        check.expect(gathered == as_bytes(gathered_shm), describe("ring allgather over Gloo", dtype, op, count));
        shm.broadcast(broadcast_shm, n - 1)->wait();
        ref::tree_broadcast(over_gloo, root_last.data(), int64_t(root_last.size()), n - 1);
        check.expect(root_last == as_bytes(broadcast_shm), describe("tree broadcast over Gloo", dtype, op, count));
      }
  }

  // Non-integer values: each algorithm in its documented order; naive also equals shm.
  bool orders_differ = false;
  for (DType dtype : {DType::f32, DType::f64, DType::bf16})
    for (int64_t count : counts) {
      const dist::ReduceOp op = dist::ReduceOp::sum;
      std::vector<Bytes> inputs;
      for (int q = 0; q < n; ++q) inputs.push_back(input_bytes(dtype, q, count, 4, true, op));
      for (ref::AllreduceAlgorithm algorithm : kAlgorithms) {
        Bytes data = inputs[size_t(rank)];
        ref::allreduce(algorithm, peers, data.data(), count, dtype, op);
        const Bytes want = documented_order(algorithm, inputs, count, dtype, op);
        check.expect(data == want, describe(ref::allreduce_algorithm_name(algorithm), dtype, op, count) +
                                       " on fractions equals its documented order");
        orders_differ = orders_differ || want != documented_order(ref::AllreduceAlgorithm::naive, inputs, count, dtype, op);
      }
      if (dtype != DType::bf16) {  // shm accumulates bf16 in f32 and rounds once; naive rounds each step
        Tensor by_shm = as_tensor(inputs[size_t(rank)], dtype);
        shm.allreduce(by_shm, op)->wait();
        Bytes data = inputs[size_t(rank)];
        ref::naive_allreduce(peers, data.data(), count, dtype, op);
        check.expect(data == as_bytes(by_shm), describe("naive on fractions equals shm:", dtype, op, count));
      }
    }
  // With 3 or more ranks the orders are different sums: the order checks above can fail.
  if (n >= 3) check.expect(orders_differ, "the documented orders give different bits somewhere");

  // The backend itself, through ProcessGroup: its name, and the reserved tag refused.
  std::shared_ptr<dist::ProcessGroup> reference = dist::new_group(everyone, "reference");
  check.expect(reference->backend_name() == "reference", "backend name " + reference->backend_name());
  if (n > 1) {
    Tensor t = make_tensor(Shape{1}, DType::f32);
    try {
      reference->send(t, (rank + 1) % n, ref::kCollectiveTag)->wait();
      check.expect(false, "a send with the collectives' tag was accepted");
    } catch (const Error& error) {
      check.expect(std::string(error.what()).find("is reserved") != std::string::npos, error.what());
    }
  }
  transport.reset();
  dist::destroy_process_group();
  std::printf("rank %d: reference collectives: %d of %d checks passed\n", rank, check.run - check.failed, check.run);
  return check.failed == 0 ? 0 : 1;
}

}  // namespace

// Two DDP replicas of one model, trained on the same slices of the same
// batches, one over shm (the world) and one over backend "reference": their
// parameters must be equal bit for bit where the all-reduce adds in the same
// order (2 ranks: one addition, which commutes; naive, and halving_doubling
// on 3 ranks: rank order, as shm adds f32), and within 1e-5 otherwise. Either way every rank of the
// reference run must hold the same bits (each algorithm hands out one result).
EMBER_SCENARIO(reference_ddp) {
  dist::ProcessGroup& shm = dist::init_process_group({.backend = "shm"});
  const int n = shm.size(), rank = shm.rank();
  std::vector<int> everyone;
  for (int q = 0; q < n; ++q) everyone.push_back(q);
  std::shared_ptr<dist::ProcessGroup> reference = dist::new_group(everyone, "reference");
  const char* variable = std::getenv("EMBER_REFERENCE_ALLREDUCE");
  const std::string algorithm = variable ? variable : "ring";
  auto make_model = [] {
    manual_seed(7);
    return std::make_shared<nn::Sequential>(nn::Linear(8, 16), nn::Tanh(), nn::Linear(16, 4));
  };
  auto by_shm = make_model(), by_reference = make_model();
  {
    // Small buckets: several all-reduces per step, of sizes no world size divides.
    const dist::DDPOptions options{.bucket_cap_mb = 0.0003};
    dist::DistributedDataParallel ddp_shm(by_shm, shm, options), ddp_reference(by_reference, *reference, options);
    optim::SGD optimizer_shm(by_shm->parameters(), {.lr = 0.1, .momentum = 0.9});
    optim::SGD optimizer_reference(by_reference->parameters(), {.lr = 0.1, .momentum = 0.9});
    for (int step = 0; step < 10; ++step) {
      Generator generator(100 + uint64_t(step));
      Tensor inputs = randn({3 * n, 8}, {}, &generator);
      Tensor targets = randint(0, 4, {3 * n}, {.dtype = DType::i64}, &generator);
      Tensor x = inputs.narrow(0, 3 * rank, 3), y = targets.narrow(0, 3 * rank, 3);
      for (auto [model, optimizer] : {std::pair{by_shm, &optimizer_shm}, std::pair{by_reference, &optimizer_reference}}) {
        Tensor loss = nn::functional::cross_entropy((*model)(x), y);
        optimizer->zero_grad();
        loss.backward();
        optimizer->step();
      }
    }
  }
  // halving_doubling on 3 ranks folds ranks 0 and 1 first, then adds rank 2: rank order too.
  const bool same_order = n <= 2 || algorithm == "naive" || (algorithm == "halving_doubling" && n == 3);
  double worst = 0;
  bool bitwise = true, replicas_agree = true;
  const NamedTensors a = by_shm->named_parameters(), b = by_reference->named_parameters();
  for (size_t i = 0; i < a.size(); ++i) {
    bitwise = bitwise && as_bytes(a[i].second.contiguous()) == as_bytes(b[i].second.contiguous());
    worst = std::max(worst, max(abs(a[i].second - b[i].second)).item<double>());
    Tensor highest = b[i].second.clone(), lowest = b[i].second.clone();
    shm.allreduce(highest, dist::ReduceOp::max)->wait();
    shm.allreduce(lowest, dist::ReduceOp::min)->wait();
    replicas_agree = replicas_agree && as_bytes(highest) == as_bytes(lowest);
  }
  const bool ok = replicas_agree && (same_order ? bitwise : worst <= 1e-5);
  std::printf("rank %d: reference_ddp %s on %d ranks: max |shm - reference| = %.3g, bit for bit %s (%s), replicas "
              "agree %s: %s\n",
              rank, algorithm.c_str(), n, worst, bitwise ? "yes" : "no", same_order ? "required" : "not required",
              replicas_agree ? "yes" : "no", ok ? "ok" : "FAILED");
  dist::destroy_process_group();
  return ok ? 0 : 1;
}

// The learner's path: init_process_group({.backend = "reference"}) before the
// Accelerator, which then trains over that default group (gradient
// accumulation, AdamW, a shuffled DataLoader).
EMBER_SCENARIO(reference_accelerator) {
  dist::ProcessGroup& group = dist::init_process_group({.backend = args.at(0)});
  uint64_t digest = 1469598103934665603ull;  // FNV-1a over every parameter's bytes
  {
    Accelerator accelerator({.gradient_accumulation_steps = 2});
    manual_seed(3);
    auto model = std::make_shared<nn::Sequential>(nn::Linear(8, 16), nn::Tanh(), nn::Linear(16, 4));
    optim::AdamW optimizer(model->parameters(), {.lr = 1e-2});
    Generator generator(5);
    data::TensorDataset dataset(randn({48, 8}, {}, &generator), randint(0, 4, {48}, {.dtype = DType::i64}, &generator));
    data::DataLoader loader(dataset, {.batch_size = 4, .shuffle = true, .seed = 9});
    accelerator.prepare(model, optimizer, loader);
    for (auto& [inputs, targets] : loader) {
      auto step = accelerator.accumulate(model);
      accelerator.backward(nn::functional::cross_entropy((*model)(inputs), targets));
      optimizer.step();
      optimizer.zero_grad();
    }
    for (const auto& entry : model->named_parameters())
      for (std::byte b : as_bytes(entry.second.contiguous())) digest = (digest ^ uint64_t(b)) * 1099511628211ull;
  }
  std::printf("rank %d: accelerator over %s: parameters digest %016llx\n", group.rank(), group.backend_name().c_str(),
              static_cast<unsigned long long>(digest));
  dist::destroy_process_group();
  return 0;
}

}  // namespace ember::test
