// Conformance scenarios for ProcessGroup on any backend, run by
// tests/distributed/test_collectives.cpp through `ember launch`:
//   collectives <backend> [cuda] [big]  every collective, dtype, reduce op and
//                                 size class, checked against values computed
//                                 here from every rank's (deterministic) inputs;
//                                 on this process's GPU with "cuda" or backend
//                                 nccl (tests/cuda/test_cuda_nccl.cpp)
//   collectives_mismatch <backend> [nodebug|sizes|empty] ranks 0 and 1 call different collectives
//   collectives_debug_store <backend> debug mode keeps the store from growing
//   collectives_peer_dies <backend> rank 1 exits mid-job; the others' next
//                                 collective must fail with an ember::Error, not hang
//   collectives_peer_stalls <backend> rank 1 skips a collective; the others
//                                 time out with an error naming it
//   collectives_no_destroy <backend> exits without destroy_process_group
//   collectives_backend            prints what "auto" chose, then runs an
//                                 allreduce on a "gloo" subgroup of every rank
// Each rank prints what failed; the exit code is the number of failed checks (capped).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "core/stream.h"
#include "core/tensor.h"
#include "distributed/process_group.h"
#include "workers/scenario.h"

namespace ember::test {
namespace {

using distributed::ProcessGroup;
using distributed::ReduceOp;

constexpr ReduceOp kAllOps[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min, ReduceOp::product};

// Small integers, so every sum and product is exact in every dtype (bf16
// included) whatever order a backend reduces in.
double value(int rank, int64_t i, int salt) { return double((rank * 7 + i * 3 + salt) % 9 - 4); }
double factor(int rank, int64_t i) { return double((rank + i) % 3 == 0 ? -1 : (rank + i) % 3); }  // -1, 1, 2

template <class T>
T to_element(double v) {
  if constexpr (std::is_same_v<T, bool>) return v != 0;
  else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) return T(float(v));
  else return T(v);
}

// A contiguous tensor with element i = f(i).
Tensor make_values(DType dtype, const Shape& shape, const std::function<double(int64_t)>& f) {
  Tensor t = make_tensor(shape, dtype);
  visit_dtype(dtype, [&]<class T>() {
    T* data = static_cast<T*>(t.data_ptr());
    for (int64_t i = 0; i < t.numel(); ++i) data[i] = to_element<T>(f(i));
  });
  return t;
}

// What reducing these per-rank values gives, computed the way the backends
// do: in ComputeType<T>, rounded to T, AVG as SUM then a division.
std::vector<double> reduce_expected(DType dtype, ReduceOp op, const std::vector<std::vector<double>>& per_rank) {
  const int size = int(per_rank.size());
  std::vector<double> out(per_rank.at(0).size());
  visit_dtype(dtype, [&]<class T>() {
    using C = ComputeType<T>;
    for (size_t i = 0; i < out.size(); ++i) {
      if constexpr (std::is_same_v<T, bool>) {
        bool acc = per_rank[0][i] != 0;
        for (int q = 1; q < size; ++q) acc = op == ReduceOp::max ? (acc || per_rank[q][i] != 0) : (acc && per_rank[q][i] != 0);
        out[i] = acc;
      } else {
        C acc = C(to_element<T>(per_rank[0][i]));
        for (int q = 1; q < size; ++q) {
          const C x = C(to_element<T>(per_rank[size_t(q)][i]));
          if (op == ReduceOp::sum || op == ReduceOp::avg) acc = C(T(acc + x));
          else if (op == ReduceOp::product) acc = C(T(acc * x));
          else if (op == ReduceOp::max) acc = acc < x ? x : acc;
          else acc = x < acc ? x : acc;
        }
        if (op == ReduceOp::avg) acc = C(T(C(T(acc)) / C(size)));
        out[i] = double(T(acc));
      }
    }
  });
  return out;
}

struct Checker {
  int rank;
  int checks = 0;
  int failures = 0;

  void expect(bool ok, const std::string& what) {
    ++checks;
    if (ok) return;
    ++failures;
    std::printf("rank %d FAILED: %s\n", rank, what.c_str());
  }
  void expect_values(const std::string& what, const std::vector<double>& got, const std::vector<double>& want) {
    size_t bad = 0;
    while (bad < got.size() && bad < want.size() && got[bad] == want[bad]) ++bad;
    if (got.size() != want.size())
      expect(false, fmt::format("{}: {} values, expected {}", what, got.size(), want.size()));
    else if (bad < got.size())
      expect(false, fmt::format("{}: element {} is {}, expected {}", what, bad, got[bad], want[bad]));
    else
      expect(true, what);
  }
  // `body` must throw an ember::Error whose message contains `text`.
  void expect_error(const std::string& what, const std::string& text, const std::function<void()>& body) {
    try {
      body();
      expect(false, what + ": no error");
    } catch (const Error& error) {
      expect(std::string(error.what()).find(text) != std::string::npos,
             fmt::format("{}: error '{}' lacks '{}'", what, error.what(), text));
    }
  }
};

std::string label(const char* op, DType dtype, int64_t n, const char* extra = "") {
  return fmt::format("{}({}, n={}{})", op, dtype_name(dtype), n, extra);
}

// Every test below makes its inputs on the CPU and moves them to `device`
// (the identity on the CPU); results are read back through to_vector.
void test_allreduce(ProcessGroup& group, Checker& check, Device device) {
  const int size = group.size();
  for (DType dtype : kAllDTypes)
    for (ReduceOp op : kAllOps) {
      if (!distributed::host_reduction_supported(dtype, op)) continue;
      for (int64_t n : {int64_t(0), int64_t(1), int64_t(1023), int64_t(size * 3 + 1)}) {
        auto input = [&](int q) {
          return make_values(dtype, {n}, [&](int64_t i) { return op == ReduceOp::product ? factor(q, i) : value(q, i, 1); });
        };
        std::vector<std::vector<double>> per_rank;
        for (int q = 0; q < size; ++q) per_rank.push_back(input(q).to_vector<double>());
        Tensor t = input(group.rank()).to(device);
        group.allreduce(t, op)->wait();
        check.expect_values(label("allreduce", dtype, n, fmt::format(", {}", reduce_op_name(op)).c_str()),
                            t.to_vector<double>(), reduce_expected(dtype, op, per_rank));
      }
    }
}

// allreduce_into (Note [Reducing into a bucket]): pieces of every kind laid
// end to end: empty, one element, one spanning the shm backend's 1 MiB chunks
// and its ranks' shares, one transposed, and one that is already the part of
// the output it stands for. The pieces that lie elsewhere must be unchanged.
// Mutations caught: a piece's run read from the wrong offset (`begin +
// offset - starts_[p]` as `offset` in shm's Pieces::for_each_run), a run cut
// at a piece's end skipped (the `n` of the next piece), and the in-place
// piece copied over itself from a stale place.
void test_allreduce_into(ProcessGroup& group, Checker& check, Device device) {
  const int size = group.size(), rank = group.rank();
  const std::vector<int64_t> lengths = {0, 1, 300'001, 35, 70'000, 123'457};
  const size_t transposed = 3, in_place = 4;  // piece 3 is [7, 5] read through .t(); piece 4 lies in the output
  for (DType dtype : {DType::f32, DType::bf16, DType::i64})
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max}) {
      if (!distributed::host_reduction_supported(dtype, op)) continue;
      int64_t total = 0;
      for (int64_t n : lengths) total += n;
      auto piece_values = [&](int q, size_t p) {
        return make_values(dtype, {lengths[p]}, [&](int64_t i) { return value(q, i, int(p)); });
      };
      std::vector<std::vector<double>> per_rank(static_cast<size_t>(size));
      for (int q = 0; q < size; ++q)
        for (size_t p = 0; p < lengths.size(); ++p)
          for (double v : piece_values(q, p).to_vector<double>()) per_rank[size_t(q)].push_back(v);
      Tensor output = make_tensor({total}, dtype, device);
      std::vector<Tensor> inputs;
      int64_t at = 0;
      for (size_t p = 0; p < lengths.size(); ++p) {
        Tensor values = piece_values(rank, p).to(device);
        if (p == transposed) values = values.view({5, 7}).t().contiguous().t();  // same values, strided
        if (p == in_place) {
          Tensor place = output.narrow(0, at, lengths[p]);
          place.copy_(values);
          values = place;
        }
        inputs.push_back(values);
        at += lengths[p];
      }
      const std::string what = label("allreduce_into", dtype, total, fmt::format(", {}", reduce_op_name(op)).c_str());
      group.allreduce_into(output, inputs, op)->wait();
      check.expect_values(what, output.to_vector<double>(), reduce_expected(dtype, op, per_rank));
      for (size_t p = 0; p < lengths.size(); ++p)
        if (p != in_place)
          check.expect_values(fmt::format("{}: piece {} unchanged", what, p), inputs[p].contiguous().to_vector<double>(),
                              piece_values(rank, p).to_vector<double>());
    }
  Tensor output = make_tensor({8}, DType::f32, device);
  check.expect_error("allreduce_into count", "the inputs hold 7 elements, the output [8] has 8",
                     [&] { group.allreduce_into(output, {make_tensor({7}, DType::f32, device)}); });
  check.expect_error("allreduce_into dtypes", "output dtype float32 differs from input dtype float64",
                     [&] { group.allreduce_into(output, {make_tensor({8}, DType::f64, device)}); });
  check.expect_error("allreduce_into overlap", "overlaps the output ([8]) elsewhere than at its own place",
                     [&] { group.allreduce_into(output, {output.narrow(0, 4, 4), output.narrow(0, 0, 4)}); });
  check.expect_error("allreduce_into strided output", "allreduce_into: the output ([2, 4], float32) must be contiguous",
                     [&] { group.allreduce_into(make_tensor({4, 2}, DType::f32, device).t(), {output}); });
}

// Note [Symmetric memory]: empty_symmetric's tensors (shm: mapped by every
// rank; gloo: ordinary) through allreduce whole and through the same view on
// every rank, and as allreduce_into's output with one piece in place and one
// outside (DDP's buckets), against the expected reduction.
void test_symmetric(ProcessGroup& group, Checker& check) {
  const int size = group.size(), rank = group.rank();
  for (DType dtype : {DType::f32, DType::bf16})
    for (int64_t n : {int64_t(7), int64_t(300'001)}) {
      auto values = [&](int q, int which) { return make_values(dtype, {n}, [&](int64_t i) { return value(q, i, which); }); };
      auto expected = [&](int which, ReduceOp op) {
        std::vector<std::vector<double>> per_rank;
        for (int q = 0; q < size; ++q) per_rank.push_back(values(q, which).to_vector<double>());
        return reduce_expected(dtype, op, per_rank);
      };
      const std::string what = label("empty_symmetric", dtype, n);
      Tensor t = group.empty_symmetric({n + 8}, dtype);
      check.expect(t.shape() == Shape{n + 8} && t.dtype() == dtype && t.is_contiguous(), what + ": shape and dtype");
      const bool mapped = group.backend_name() == "shm" && size > 1;
      check.expect(group.is_symmetric(t) == mapped && group.is_symmetric(t.narrow(0, 2, n)) == mapped &&
                       !group.is_symmetric(make_tensor({n}, dtype)),
                   fmt::format("{}: is_symmetric on {} ranks of {}", what, size, group.backend_name()));
      Tensor view = t.narrow(0, 3, n);
      view.copy_(values(rank, 1));
      group.allreduce(view, ReduceOp::sum)->wait();
      check.expect_values(what + " allreduce of a view", view.to_vector<double>(), expected(1, ReduceOp::sum));
      Tensor whole = t.narrow(0, 0, n);
      whole.copy_(values(rank, 2));
      group.allreduce(whole, ReduceOp::avg)->wait();
      check.expect_values(what + " allreduce avg", whole.to_vector<double>(), expected(2, ReduceOp::avg));
      const int64_t half = n / 2;
      Tensor outside = values(rank, 3).narrow(0, 0, half).contiguous();
      Tensor in_place = whole.narrow(0, half, n - half);
      in_place.copy_(values(rank, 3).narrow(0, half, n - half));
      group.allreduce_into(whole, {outside, in_place}, ReduceOp::sum)->wait();
      check.expect_values(what + " allreduce_into", whole.to_vector<double>(), expected(3, ReduceOp::sum));
    }
  check.expect_error("empty_symmetric negative size", "empty_symmetric([-1], float32): sizes must be non-negative",
                     [&] { group.empty_symmetric({-1}); });
}

void test_broadcast(ProcessGroup& group, Checker& check, Device device) {
  const int root = group.size() - 1;  // non-zero whenever there is more than one rank
  for (DType dtype : kAllDTypes)
    for (int64_t n : {0, 1, 1023}) {
      Tensor t = make_values(dtype, {n}, [&](int64_t i) { return value(group.rank(), i, 2); }).to(device);
      group.broadcast(t, root)->wait();
      check.expect_values(label("broadcast", dtype, n), t.to_vector<double>(),
                          make_values(dtype, {n}, [&](int64_t i) { return value(root, i, 2); }).to_vector<double>());
    }
}

void test_allgather(ProcessGroup& group, Checker& check, Device device) {
  const int size = group.size();
  for (DType dtype : kAllDTypes)
    for (int64_t n : {0, 1, 1023}) {
      Tensor input = make_values(dtype, {n}, [&](int64_t i) { return value(group.rank(), i, 3); }).to(device);
      Tensor output = make_tensor({size, n}, dtype, device);
      group.allgather(output, input)->wait();
      std::vector<double> want;
      for (int q = 0; q < size; ++q)
        for (double v : make_values(dtype, {n}, [&](int64_t i) { return value(q, i, 3); }).to_vector<double>()) want.push_back(v);
      check.expect_values(label("allgather", dtype, n), output.to_vector<double>(), want);
    }
}

void test_reduce_scatter(ProcessGroup& group, Checker& check, Device device) {
  const int size = group.size(), rank = group.rank();
  for (DType dtype : kAllDTypes)
    for (ReduceOp op : kAllOps) {
      if (!distributed::host_reduction_supported(dtype, op)) continue;
      for (int64_t n : {0, 1, 341}) {
        auto input = [&](int q) {
          return make_values(dtype, {size * n}, [&](int64_t i) { return op == ReduceOp::product ? factor(q, i) : value(q, i, 4); });
        };
        std::vector<std::vector<double>> blocks;  // every rank's block `rank`
        for (int q = 0; q < size; ++q) {
          auto all = input(q).to_vector<double>();
          blocks.emplace_back(all.begin() + rank * n, all.begin() + (rank + 1) * n);
        }
        Tensor output = make_tensor({n}, dtype, device);
        group.reduce_scatter(output, input(rank).to(device), op)->wait();
        check.expect_values(label("reduce_scatter", dtype, n, fmt::format(", {}", reduce_op_name(op)).c_str()),
                            output.to_vector<double>(), n == 0 ? std::vector<double>{} : reduce_expected(dtype, op, blocks));
      }
    }
}

void test_all_to_all(ProcessGroup& group, Checker& check, Device device) {
  const int size = group.size(), rank = group.rank();
  auto code = [](int q, int64_t j) { return double(q * 10 + j % 10); };  // exact in bf16 too
  for (DType dtype : kAllDTypes) {
    if (dtype == DType::boolean) continue;
    for (int64_t n : {0, 1, 341}) {
      Tensor input = make_values(dtype, {size * n}, [&](int64_t j) { return code(rank, j); }).to(device);
      Tensor output = make_tensor({size * n}, dtype, device);
      group.all_to_all(output, input)->wait();
      // Block q of the output is block `rank` of rank q's input.
      Tensor want = make_values(dtype, {size * n}, [&](int64_t j) { return code(int(j / n), rank * n + j % n); });
      check.expect_values(label("all_to_all", dtype, n), output.to_vector<double>(), want.to_vector<double>());
    }
  }
}

// Sends `sent` to the next rank and receives `received` from the previous
// one. On the CPU: send first, tagged, as a ring of host sends cannot block.
// On a GPU: tag 0 (NCCL has no tags), and even ranks send first while odd
// ranks receive first, because a GPU send waits for its receiver.
void ring_exchange(ProcessGroup& group, const Tensor& sent, const Tensor& received, uint32_t tag) {
  const int size = group.size(), rank = group.rank();
  const int next = (rank + 1) % size, previous = (rank + size - 1) % size;
  if (sent.device().is_cpu()) {
    auto send = group.send(sent, next, tag);
    group.recv(received, previous, tag)->wait();
    send->wait();
  } else if (rank % 2 == 0) {
    group.send(sent, next)->wait();
    group.recv(received, previous)->wait();
  } else {
    group.recv(received, previous)->wait();
    group.send(sent, next)->wait();
  }
}

// Every rank sends to the next and receives from the previous one. On the
// CPU, two messages told apart by their tags are received in the opposite
// order; on a GPU, messages between two ranks match in call order.
void test_send_recv(ProcessGroup& group, Checker& check, Device device) {
  const int size = group.size(), rank = group.rank();
  if (size == 1) return;
  const int next = (rank + 1) % size, previous = (rank + size - 1) % size;
  for (DType dtype : {DType::f32, DType::i64, DType::bf16}) {
    for (int64_t n : {1, 1023}) {
      Tensor first = make_values(dtype, {n}, [&](int64_t i) { return value(rank, i, 5); }).to(device);
      Tensor second = make_values(dtype, {n}, [&](int64_t i) { return value(rank, i, 6); }).to(device);
      Tensor got_second = make_tensor({n}, dtype, device), got_first = make_tensor({n}, dtype, device);
      if (device.is_cpu()) {
        auto send_first = group.send(first, next, 1);
        auto send_second = group.send(second, next, 2);
        auto recv_second = group.recv(got_second, previous, 2);
        auto recv_first = group.recv(got_first, previous, 1);
        for (auto& work : {send_first, send_second, recv_second, recv_first}) work->wait();
      } else {
        ring_exchange(group, first, got_first, 0);
        ring_exchange(group, second, got_second, 0);
      }
      check.expect_values(label("recv first", dtype, n), got_first.to_vector<double>(),
                          make_values(dtype, {n}, [&](int64_t i) { return value(previous, i, 5); }).to_vector<double>());
      check.expect_values(label("recv second", dtype, n), got_second.to_vector<double>(),
                          make_values(dtype, {n}, [&](int64_t i) { return value(previous, i, 6); }).to_vector<double>());
    }
  }
}

// Transposed views in and out: staged through contiguous copies and copied back.
void test_non_contiguous(ProcessGroup& group, Checker& check, Device device) {
  const int size = group.size(), rank = group.rank();
  auto base_of = [&](int q, int salt) { return make_values(DType::f32, {7, 5}, [&](int64_t i) { return value(q, i, salt); }); };

  Tensor base = base_of(rank, 7).to(device);
  group.allreduce(base.t(), ReduceOp::sum)->wait();  // elementwise: the layout does not matter
  std::vector<std::vector<double>> per_rank;
  for (int q = 0; q < size; ++q) per_rank.push_back(base_of(q, 7).to_vector<double>());
  check.expect_values("allreduce(transposed view)", base.to_vector<double>(), reduce_expected(DType::f32, ReduceOp::sum, per_rank));

  // Two operations queued before either is waited for run in order, the
  // second reading its (transposed) input after the first wrote it (Note
  // [Staging on the communication thread]). Catches: a non-contiguous input
  // copied when queued (the second all-reduce summed the original values and
  // wrote them over the first's result).
  Tensor chained = make_values(DType::f32, {2, 2}, [](int64_t) { return 1; }).to(device);
  std::shared_ptr<distributed::Work> first = group.allreduce(chained, ReduceOp::sum);
  std::shared_ptr<distributed::Work> second = group.allreduce(chained.t(), ReduceOp::sum);
  first->wait();
  second->wait();
  check.expect_values("allreduce(x) then allreduce(x.t()) queued together", chained.to_vector<double>(),
                      std::vector<double>(4, double(size) * size));

  base = base_of(rank, 8).to(device);
  group.broadcast(base.t(), 0)->wait();
  check.expect_values("broadcast(transposed view)", base.to_vector<double>(), base_of(0, 8).to_vector<double>());

  // allgather of a transposed input into a transposed output.
  Tensor input = base_of(rank, 9).to(device).t();           // [5, 7], non-contiguous
  Tensor output_base = make_tensor({35, size}, DType::f32, device);
  Tensor output = output_base.t();                          // [size, 35], non-contiguous
  group.allgather(output, input)->wait();
  std::vector<double> want;
  for (int q = 0; q < size; ++q)
    for (double v : base_of(q, 9).t().to_vector<double>()) want.push_back(v);
  check.expect_values("allgather(transposed views)", output.to_vector<double>(), want);

  if (size > 1) {
    const int previous = (rank + size - 1) % size;
    Tensor received = make_tensor({7, 5}, DType::f32, device);
    ring_exchange(group, base_of(rank, 10).to(device).t(), received.t(), 3);
    check.expect_values("recv(transposed view)", received.to_vector<double>(), base_of(previous, 10).to_vector<double>());
  }
}

// Several operations in flight at once, waited for in reverse: FIFO order on
// the communication thread keeps them matched across ranks.
void test_queued(ProcessGroup& group, Checker& check, Device device) {
  const int size = group.size();
  std::vector<Tensor> tensors;
  std::vector<std::shared_ptr<distributed::Work>> works;
  for (int k = 0; k < 8; ++k) {
    tensors.push_back(make_values(DType::f64, {17}, [&](int64_t i) { return value(group.rank(), i, k); }).to(device));
    works.push_back(group.allreduce(tensors.back(), ReduceOp::sum));
  }
  works.push_back(group.barrier());
  for (auto it = works.rbegin(); it != works.rend(); ++it) (*it)->wait();
  for (int k = 0; k < 8; ++k) {
    std::vector<std::vector<double>> per_rank;
    for (int q = 0; q < size; ++q)
      per_rank.push_back(make_values(DType::f64, {17}, [&](int64_t i) { return value(q, i, k); }).to_vector<double>());
    check.expect_values(fmt::format("queued allreduce {}", k), tensors[size_t(k)].to_vector<double>(),
                        reduce_expected(DType::f64, ReduceOp::sum, per_rank));
    check.expect(works[size_t(k)]->is_completed(), "queued work completed");
  }
}

// max and min propagate a NaN from any rank, as torch.max: rank r holds
// {5, NaN, 1}[r % 3] everywhere. The rings combined `own < partial ? partial
// : own`, which dropped a partial's NaN, so the answer depended on the
// element's block and the ranks' order (max over {5, NaN, 1} gave 1 on Gloo's
// reduce-scatter; shm gave 5 everywhere). Host backends only: NCCL's own
// kernels decide there. Mutation caught: reduce_typed's or shm's combine back
// to the comparison -> a finite value where NaN is expected.
void test_nan_extremes(ProcessGroup& group, Checker& check, Device device) {
  if (device.type != DeviceType::cpu || group.size() < 2) return;
  const float mine[] = {5.0f, std::nanf(""), 1.0f};
  const float value = mine[group.rank() % 3];
  for (ReduceOp op : {ReduceOp::max, ReduceOp::min}) {
    Tensor t = full({6}, value);
    group.allreduce(t, op)->wait();
    for (float x : t.to_vector<float>())
      check.expect(std::isnan(x), fmt::format("allreduce {} with a NaN on rank 1 gives NaN, got {}", reduce_op_name(op), x));
    Tensor out = make_tensor({2}, DType::f32);
    group.reduce_scatter(out, full({2 * int64_t(group.size())}, value), op)->wait();
    for (float x : out.to_vector<float>())
      check.expect(std::isnan(x), fmt::format("reduce_scatter {} with a NaN on rank 1 gives NaN, got {}", reduce_op_name(op), x));
  }
  // wait(milliseconds::max()), the "never" of init and the store, reported a
  // timeout at once (the deadline overflowed) when the work was not done yet:
  // rank 0 joins late, so the others wait. Mutation caught: Work::wait without
  // the clamp -> "Work::wait timed out after 9223372036854775807 ms".
  Tensor one = full({1}, 1.0f);
  if (group.rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  group.allreduce(one, ReduceOp::sum)->wait(std::chrono::milliseconds::max());
  check.expect(one.item<float>() == float(group.size()), "allreduce waited for with milliseconds::max()");
}

// Errors raised on the calling thread, before anything is queued (every rank
// makes the same calls, so the groups stay in step).
void test_validation(ProcessGroup& group, Checker& check, Device device) {
  const int size = group.size();
  auto empty = [&](Shape shape, DType dtype) { return make_tensor(shape, dtype, device); };
  check.expect_error("avg of int32", "reduce op avg is not supported for int32",
                     [&] { group.allreduce(empty({4}, DType::i32), ReduceOp::avg); });
  // An output whose elements share memory (expand) kept one value of several
  // (allgather into [1].expand({2}) kept rank 1's). Refused, as copy_ refuses
  // it. Mutation caught: allgather and recv without check_no_internal_overlap.
  check.expect_error("expanded allgather output", "allgather: the tensor written to",
                     [&] { group.allgather(empty({1}, DType::f32).expand({size * 2}), empty({2}, DType::f32)); });
  check.expect_error("expanded recv", "recv: the tensor written to",
                     [&] { group.recv(empty({1}, DType::f32).expand({2}), (group.rank() + 1) % size); });
  // An f16 average on a backend without averages of its own was an f16 sum
  // then a division: 2 x 65504 overflowed to inf (gloo, reference) where the
  // mean is 65504. Summed in f32 now, as shm does. Mutation caught:
  // average_run without `widen`.
  Tensor big = make_values(DType::f16, {3}, [](int64_t) { return 65504; }).to(device);
  group.allreduce(big, ReduceOp::avg)->wait();
  check.expect_values("float16 avg of 65504", big.to_vector<double>(), std::vector<double>(3, 65504));
  Tensor scattered = make_values(DType::f16, {1}, [](int64_t) { return 0; }).to(device);
  group.reduce_scatter(scattered, make_values(DType::f16, {size}, [](int64_t) { return 65504; }).to(device), ReduceOp::avg)
      ->wait();
  check.expect_values("float16 reduce_scatter avg of 65504", scattered.to_vector<double>(), {65504});
  // On bool, sum is "any" and product "all", as PyTorch's (they were refused).
  // Mutation caught: checked_reduction without the bool mapping -> refused.
  Tensor any = from_vector<bool>({group.rank() == 0, true}).to(device), all = any.clone();
  group.allreduce(any, ReduceOp::sum)->wait();
  group.allreduce(all, ReduceOp::product)->wait();
  check.expect(any.to_vector<bool>() == std::vector<bool>{true, true}, "bool sum is any");
  check.expect(all.to_vector<bool>() == std::vector<bool>{size == 1, true}, "bool product is all");
  check.expect_error("allgather size", "allgather: output [3] has 3 elements",
                     [&] { group.allgather(empty({3}, DType::f32), empty({size * 3 + 1}, DType::f32)); });
  check.expect_error("allgather dtypes", "output dtype float64 differs from input dtype float32",
                     [&] { group.allgather(empty({size}, DType::f64), empty({1}, DType::f32)); });
  // Catches: an input overlapping the output away from its own block taken
  // (the ranks then gathered different, half-overwritten values).
  if (size > 1) {
    Tensor gathered = empty({2 * size}, DType::f32);
    const int64_t elsewhere = group.rank() == 0 ? 1 : 0;
    check.expect_error("allgather overlap", "allgather: the input ([2]) overlaps the output ([" +
                                                std::to_string(2 * size) + "]) elsewhere than at this rank's block",
                       [&] { group.allgather(gathered, gathered.narrow(0, elsewhere, 2)); });
    check.expect_error("all_to_all overlap", "all_to_all: the input",
                       [&] { group.all_to_all(gathered, gathered); });
  }
  check.expect_error("reduce_scatter size", "reduce_scatter: input [5]",
                     [&] { group.reduce_scatter(empty({size + 1}, DType::f32), empty({5}, DType::f32)); });
  check.expect_error("broadcast root", fmt::format("broadcast: root {} is out of range", size),
                     [&] { group.broadcast(empty({2}, DType::f32), size); });
  check.expect_error("send to self", fmt::format("send: dst {} must be another rank", group.rank()),
                     [&] { group.send(empty({2}, DType::f32), group.rank()); });
  if (size > 1)
    check.expect_error("all_to_all split", "divisible by the group's",
                       [&] { group.all_to_all(empty({size + 1}, DType::f32), empty({size + 1}, DType::f32)); });
  if (device.is_cpu()) return;
  // What only CUDA tensors can get wrong.
  check.expect_error("tag on a GPU", "send: tag 3 on a CUDA tensor",
                     [&] { group.send(empty({2}, DType::f32), (group.rank() + 1) % size, 3); });
  if (group.backend_name(DeviceType::cpu).empty())
    check.expect_error("CPU tensor to nccl", "is on the CPU; the group's nccl backend takes CUDA tensors only",
                       [&] { group.allreduce(make_tensor({2}, DType::f32), ReduceOp::sum); });
  else
    check.expect_error("allgather devices", fmt::format("allgather: the output is on {} but the input on cpu", device),
                       [&] { group.allgather(empty({size}, DType::f32), make_tensor({1}, DType::f32)); });
}

// A subgroup: the last rank and rank 0, listed in that order (group ranks
// follow the global ones whatever the order, as torch.distributed's: listed
// as given, two ranks passing the set in different orders both took group
// rank 0 and hung); the other ranks get no group and keep using the world.
// Mutation caught: new_group without its sort -> "subgroup ranks".
void test_new_group(ProcessGroup& world, Checker& check, Device device) {
  const int size = world.size(), rank = world.rank();
  if (size == 1) return;
  const std::vector<int> members = {size - 1, 0};
  auto group = distributed::new_group(members);
  const bool member = rank == 0 || rank == size - 1;
  check.expect((group != nullptr) == member, fmt::format("new_group membership of rank {}", rank));
  if (group) {
    check.expect(group->size() == 2 && group->rank() == (rank == 0 ? 0 : 1) && group->global_rank(1) == size - 1,
                 "subgroup ranks");
    Tensor t = make_values(DType::f32, {3}, [&](int64_t) { return rank + 1; }).to(device);
    group->allreduce(t, ReduceOp::sum)->wait();
    check.expect_values("subgroup allreduce", t.to_vector<double>(), std::vector<double>(3, double(size + 1)));
    Tensor b = make_values(DType::i64, {2}, [&](int64_t i) { return rank * 100 + i; }).to(device);
    group->broadcast(b, 1)->wait();  // group rank 1 is global rank size - 1
    check.expect_values("subgroup broadcast", b.to_vector<double>(), {double((size - 1) * 100), double((size - 1) * 100 + 1)});
  }
  Tensor t = make_values(DType::f32, {1}, [&](int64_t) { return 1; }).to(device);
  world.allreduce(t, ReduceOp::sum)->wait();
  check.expect_values("world allreduce after new_group", t.to_vector<double>(), {double(size)});
}

// 64 MB of f32 (16M elements) through one allreduce.
void test_big(ProcessGroup& group, Checker& check, Device device) {
  const int size = group.size();
  Tensor t = make_tensor({int64_t(16) << 20}, DType::f32, device);
  t.fill_(Scalar(double(group.rank() + 1)));
  group.allreduce(t, ReduceOp::sum)->wait();
  const Tensor host = t.to(kCPU);
  const float* data = static_cast<const float*>(host.data_ptr());
  const float want = float(size * (size + 1) / 2);
  int64_t bad = 0;
  while (bad < host.numel() && data[bad] == want) ++bad;
  check.expect(bad == host.numel(), fmt::format("64 MB allreduce: element {} differs from {}", bad, want));
}

int finish(const Checker& check, const char* scenario) {
  std::printf("rank %d: %s: %d of %d checks passed\n", check.rank, scenario, check.checks - check.failures, check.checks);
  std::fflush(stdout);
  return check.failures == 0 ? 0 : 1;
}

// The GPU of this process's local rank, made current (as the Accelerator
// does) before the first collective on CUDA tensors; else the CPU.
Device device_for(bool on_gpu) {
  if (!on_gpu) return kCPU;
  const int local_rank = distributed::read_distributed_env().local_rank;
  cuda::set_device(local_rank);
  return Device(DeviceType::cuda, local_rank);
}

}  // namespace

EMBER_SCENARIO(collectives) {
  EMBER_CHECK(!args.empty(), "collectives: usage: collectives <backend> [cuda] [big]");
  const bool on_gpu = args[0] == "nccl" || std::find(args.begin(), args.end(), "cuda") != args.end();
  const bool big = std::find(args.begin(), args.end(), "big") != args.end();
  ProcessGroup& group = distributed::init_process_group({.backend = args[0]});
  const Device device = device_for(on_gpu);
  Checker check{.rank = group.rank()};
  // "auto" keeps its host backend's name and sends CUDA tensors to nccl.
  const std::string backend = args[0] == "auto" ? group.backend_name(device.type) : group.backend_name();
  const std::string expected = args[0] == "auto" ? (on_gpu ? "nccl" : backend) : args[0];
  check.expect(backend == expected, fmt::format("backend is {}, expected {}", backend, expected));
  if (big) {
    test_big(group, check, device);
  } else {
    test_allreduce(group, check, device);
    test_allreduce_into(group, check, device);
    if (device.is_cpu()) test_symmetric(group, check);
    test_broadcast(group, check, device);
    test_allgather(group, check, device);
    test_reduce_scatter(group, check, device);
    test_all_to_all(group, check, device);
    test_send_recv(group, check, device);
    test_non_contiguous(group, check, device);
    test_queued(group, check, device);
    test_nan_extremes(group, check, device);
    test_validation(group, check, device);
    group.barrier()->wait();
    test_new_group(group, check, device);
  }
  distributed::destroy_process_group();
  // A group kept past destroy_process_group refuses its next call (mutation:
  // destroy_process_group freeing the world group: the call used freed
  // memory, which surfaced as std::system_error; check_tensor not asking
  // whether the group is open: "takes CUDA tensors only").
  Tensor kept = make_values(DType::f32, {2}, [](int64_t) { return 1; }).to(device);
  check.expect_error("allreduce on a destroyed group", "was destroyed by destroy_process_group",
                     [&] { group.allreduce(kept)->wait(); });
  check.expect_error("barrier on a destroyed group", "barrier: the process group", [&] { group.barrier()->wait(); });

  // A second init after destroy works (new store prefixes, a fresh server),
  // and a timeout that means "never" is the longest ember keeps. Catches: the
  // deadlines computed from milliseconds::max() overflowing (the store's first
  // get failed at once, "not set after 9.22337e+15 s").
  ProcessGroup& again =
      distributed::init_process_group({.backend = args[0], .timeout = std::chrono::milliseconds::max()});
  Tensor t = make_values(DType::f32, {2}, [&](int64_t) { return 1; }).to(device);
  again.allreduce(t, ReduceOp::sum)->wait();
  check.expect_values("allreduce after re-init", t.to_vector<double>(), std::vector<double>(2, double(again.size())));
  distributed::destroy_process_group();
  return finish(check, "collectives");
}

// Rank 0 sends args[1] floats to rank 1, which receives args[2]: an error
// naming both sizes on rank 1 (exit code 3 when it is not that error).
EMBER_SCENARIO(recv_size_mismatch) {
  EMBER_CHECK(args.size() == 3, "recv_size_mismatch: usage: recv_size_mismatch <backend> <sent> <received>");
  ProcessGroup& group = distributed::init_process_group({.backend = args[0]});
  const int64_t sent = std::stoll(args[1]), received = std::stoll(args[2]);
  int code = 0;
  if (group.rank() == 0) {
    group.send(make_values(DType::f32, {sent}, [](int64_t) { return 1; }), 1, 7)->wait();
  } else if (group.rank() == 1) {
    try {
      group.recv(make_tensor({received}, DType::f32), 0, 7)->wait();
      std::printf("rank 1: a recv of %lld floats took a message of %lld\n", (long long)received, (long long)sent);
      code = 3;
    } catch (const Error& error) {
      std::printf("rank 1: %s\n", error.what());
      const std::string expected = fmt::format("the message has {} bytes, this recv expects {}", 4 * sent, 4 * received);
      if (std::string(error.what()).find(expected) == std::string::npos) code = 3;
    }
  }
  std::fflush(stdout);
  distributed::destroy_process_group();  // rank 0's: once its send is received
  return code;
}

// Ranks 0 and 1 disagree at the third collective; debug mode must name both.
// args[1] "nodebug": the same without debug mode (the shm backend compares
// the calls itself); "sizes": without debug mode, rank 1 all-reduces 8
// elements where the others all-reduce 4; "empty": the same with 0 elements.
EMBER_SCENARIO(collectives_mismatch) {
  EMBER_CHECK(!args.empty(),
              "collectives_mismatch: usage: collectives_mismatch <backend> [nodebug|sizes|empty|symmetric]");
  const std::string mode = args.size() > 1 ? args[1] : "debug";
  ProcessGroup& group = distributed::init_process_group({.backend = args[0], .debug = mode == "debug"});
  // "symmetric": both allocate (a collective), rank 0 runs its allreduces on
  // the symmetric tensor, rank 1 on an ordinary one.
  Tensor t = make_tensor({4}, DType::f32);
  if (mode == "symmetric") {
    Tensor symmetric = group.empty_symmetric({4});
    if (group.rank() == 0) t = symmetric;
  }
  t.fill_(Scalar(1.0));
  group.allreduce(t, ReduceOp::sum)->wait();
  group.barrier()->wait();
  int code = 0;
  try {
    if (group.rank() == 1 && mode == "sizes") group.allreduce(ones({8}), ReduceOp::sum)->wait();
    else if (group.rank() == 1 && mode == "empty") group.allreduce(ones({0}), ReduceOp::sum)->wait();
    else if (group.rank() == 1) group.broadcast(t, 0)->wait();
    else group.allreduce(t, ReduceOp::sum)->wait();
    std::printf("rank %d: the mismatch went unnoticed\n", group.rank());
  } catch (const Error& error) {
    std::printf("rank %d: %s\n", group.rank(), error.what());
    code = 3;
  }
  std::fflush(stdout);
  distributed::destroy_process_group();
  return code;
}

// Note [Collective debug mode]: each rank deletes its record of call n-2 at
// call n, so 20 more collectives leave the store about as large as before.
// Between two barriers the count can differ by at most one record per rank
// (a rank already past its barrier may have written its next record).
EMBER_SCENARIO(collectives_debug_store) {
  EMBER_CHECK(!args.empty(), "collectives_debug_store: usage: collectives_debug_store <backend>");
  ProcessGroup& group = distributed::init_process_group({.backend = args[0], .debug = true});
  Tensor t = make_tensor({4}, DType::f32);
  t.fill_(Scalar(1.0));
  for (int k = 0; k < 3; ++k) group.allreduce(t, ReduceOp::sum)->wait();
  group.barrier()->wait();
  const int64_t before = group.store()->num_keys();
  for (int k = 0; k < 20; ++k) group.allreduce(t, ReduceOp::max)->wait();
  group.barrier()->wait();
  const int64_t after = group.store()->num_keys();
  const bool bounded = after - before <= group.size() && before - after <= group.size();
  std::printf("rank %d: store keys %lld before, %lld after 21 more collectives%s\n", group.rank(), (long long)before,
              (long long)after, bounded ? "" : " GREW");
  std::fflush(stdout);
  distributed::destroy_process_group();
  return bounded ? 0 : 1;
}

// Rank 1 vanishes (as a crash would, but with exit code 0 so the launcher
// lets the others run on); everyone else's allreduce must fail well within
// the timeout, naming the collective.
EMBER_SCENARIO(collectives_peer_dies) {
  EMBER_CHECK(!args.empty(), "collectives_peer_dies: usage: collectives_peer_dies <backend>");
  ProcessGroup& group = distributed::init_process_group({.backend = args[0]});
  Tensor t = make_tensor({1 << 16}, DType::f32);
  t.fill_(Scalar(1.0));
  group.allreduce(t, ReduceOp::sum)->wait();
  group.barrier()->wait();
  if (group.rank() == 1) std::_Exit(0);
  const auto start = std::chrono::steady_clock::now();
  int code = 1;
  try {
    for (int k = 0; k < 100; ++k) group.allreduce(t, ReduceOp::sum)->wait();
    std::printf("rank %d: no error after rank 1 died\n", group.rank());
  } catch (const Error& error) {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const bool named = std::string(error.what()).find("allreduce([65536], float32, sum) failed on rank") != std::string::npos;
    std::printf("rank %d: peer death reported after %.1f s%s: %s\n", group.rank(), seconds,
                named ? "" : " WITHOUT naming the collective", error.what());
    code = named && seconds < double(group.timeout().count()) / 1000 ? 0 : 1;
  }
  std::fflush(stdout);
  distributed::destroy_process_group();
  return code;
}

// Exiting with groups alive (their threads, sockets and segments) must still
// end the process cleanly: the registry is never destroyed, so nothing is
// torn down during static destruction.
EMBER_SCENARIO(collectives_no_destroy) {
  EMBER_CHECK(!args.empty(), "collectives_no_destroy: usage: collectives_no_destroy <backend>");
  ProcessGroup& group = distributed::init_process_group({.backend = args[0]});
  Tensor t = make_values(DType::f32, {5}, [&](int64_t) { return 1; });
  group.allreduce(t, ReduceOp::sum)->wait();
  std::printf("rank %d: exiting without destroy_process_group\n", group.rank());
  return t.to_vector<double>() == std::vector<double>(5, double(group.size())) ? 0 : 1;
}

// Note [Choosing a backend]: on one node "auto" is "shm"; a subgroup may
// still ask for "gloo" and work next to it.
EMBER_SCENARIO(collectives_backend) {
  ProcessGroup& world = distributed::init_process_group({.backend = "auto"});
  std::printf("rank %d: backend %s\n", world.rank(), world.backend_name().c_str());
  std::vector<int> everyone;
  for (int r = 0; r < world.size(); ++r) everyone.push_back(r);
  auto tcp = distributed::new_group(everyone, "gloo");
  Tensor t = make_values(DType::i64, {3}, [&](int64_t) { return 1; });
  tcp->allreduce(t, ReduceOp::sum)->wait();
  world.allreduce(t, ReduceOp::sum)->wait();
  const bool ok = t.to_vector<double>() == std::vector<double>(3, double(world.size() * world.size()));
  std::printf("rank %d: subgroup backend %s, allreduce %s\n", world.rank(), tcp->backend_name().c_str(), ok ? "ok" : "WRONG");
  std::fflush(stdout);
  distributed::destroy_process_group();
  return ok ? 0 : 1;
}

// Rank 1 stops calling collectives for longer than the timeout; the others'
// allreduce fails after about the timeout, naming the collective and rank.
EMBER_SCENARIO(collectives_peer_stalls) {
  EMBER_CHECK(!args.empty(), "collectives_peer_stalls: usage: collectives_peer_stalls <backend>");
  ProcessGroup& group = distributed::init_process_group({.backend = args[0]});
  const auto timeout = group.timeout();
  group.barrier()->wait();
  int code = 0;
  if (group.rank() == 1) {
    std::this_thread::sleep_for(timeout + std::chrono::milliseconds(1000));
  } else {
    const auto start = std::chrono::steady_clock::now();
    Tensor t = make_tensor({8}, DType::f32);
    t.fill_(Scalar(1.0));
    try {
      group.allreduce(t, ReduceOp::sum)->wait();
      std::printf("rank %d: no error while rank 1 stalled\n", group.rank());
      code = 1;
    } catch (const Error& error) {
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const std::string text = error.what();
      const bool named = text.find("allreduce([8], float32, sum)") != std::string::npos &&
                         text.find(fmt::format("rank {}", group.rank())) != std::string::npos;
      std::printf("rank %d: stall reported after %.1f s%s: %s\n", group.rank(), seconds,
                  named ? "" : " WITHOUT naming the collective and rank", text.c_str());
      code = named && seconds < 3.0 * double(timeout.count()) / 1000 ? 0 : 1;
    }
  }
  std::fflush(stdout);
  distributed::destroy_process_group();
  return code;
}

}  // namespace ember::test
