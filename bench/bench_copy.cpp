// Strided copies: contiguous() of a transposed 1024x1024 matrix, of a 3-d and
// of a 4-d (NCHW to NHWC) permute, against a plain copy of the same bytes (a
// clone of a contiguous tensor) in the same run, per element size. The table
// compares bytes moved per second, strided over plain: issue 22's target,
// a strided copy's time within 1.2x of the plain one's, is a ratio >= 0.83.
// Beside them, the dtype conversions autocast runs every step (f32 to bf16 and
// back, 1M elements) against the plain f32 copy, also in bytes moved per
// second: a cast at memory speed comes out near 1.0. Run by
// scripts/bench.sh at 1 and 2 threads; figures go to bench/RESULTS.md.
#include <string>
#include <vector>

#include "bench_support.h"
#include "core/ops/views.h"
#include "core/parallel.h"

namespace ember::bench {
namespace {

struct Case {
  const char* name;
  Shape shape;  // of the contiguous source; every case holds 1M elements
  Dims order;   // the permutation copied; empty for the plain copy
};

const Case kCases[] = {
    {"plain", {1024, 1024}, {}},
    {"transpose", {1024, 1024}, {1, 0}},
    {"permute3d", {64, 128, 128}, {2, 0, 1}},
    {"permute4d", {16, 64, 32, 32}, {0, 2, 3, 1}},
};

const DType kDTypes[] = {DType::f32, DType::bf16, DType::f64, DType::boolean};

std::string run_name(const Case& c, DType dtype) {
  return std::string("copy/") + c.name + "/" + std::string(dtype_name(dtype));
}

void copy_case(benchmark::State& state, const Case& c, DType dtype) {
  Tensor source = uniform_tensor(c.shape, dtype, 1);
  Tensor view = c.order.ndim() == 0 ? source : permute(source, c.order);
  // The plain copy clones; a view makes contiguous() copy. Both allocate their output.
  auto copy = [&] { return c.order.ndim() == 0 ? clone(view) : contiguous(view); };
  warm_up(state, copy);
  for (auto _ : state) {
    Tensor out = copy();
    benchmark::DoNotOptimize(out.data_ptr());
  }
  state.counters["bytes/s"] = benchmark::Counter(2.0 * double(source.numel()) * double(element_size(dtype)),
                                                 benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = get_num_threads();
}

struct Cast {
  const char* name;
  DType from;
  DType to;
};

const Cast kCasts[] = {{"cast/float32_to_bfloat16", DType::f32, DType::bf16},
                       {"cast/bfloat16_to_float32", DType::bf16, DType::f32}};

void cast_case(benchmark::State& state, const Cast& c) {
  Tensor source = uniform_tensor(kCases[0].shape, c.from, 1);
  auto cast = [&] { return source.to(c.to); };
  warm_up(state, cast);
  for (auto _ : state) {
    Tensor out = cast();
    benchmark::DoNotOptimize(out.data_ptr());
  }
  const double bytes = double(source.numel()) * double(element_size(c.from) + element_size(c.to));
  state.counters["bytes/s"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = get_num_threads();
}

void register_all() {
  for (DType dtype : kDTypes)
    for (const Case& c : kCases)
      benchmark::RegisterBenchmark(run_name(c, dtype).c_str(), copy_case, c, dtype)->UseRealTime();
  for (const Cast& c : kCasts) benchmark::RegisterBenchmark(c.name, cast_case, c)->UseRealTime();
}

void print_summary(const RecordingReporter& reporter) {
  std::vector<Comparison> rows;
  for (DType dtype : kDTypes)
    for (const Case& c : kCases)
      if (c.order.ndim() != 0)
        rows.push_back({std::string(c.name) + " " + std::string(dtype_name(dtype)) + " vs plain", run_name(c, dtype),
                        run_name(kCases[0], dtype)});
  print_ratio_table(reporter, "strided copy (ember) vs plain copy of the same bytes (peer), target >= 0.83",
                    {"bytes/s", "GB/s", 1e-9}, rows);
  std::vector<Comparison> casts;
  for (const Cast& c : kCasts)
    casts.push_back({std::string(c.name) + " vs plain float32", c.name, run_name(kCases[0], DType::f32)});
  print_ratio_table(reporter, "cast (ember) vs plain float32 copy (peer), bytes moved per second", {"bytes/s", "GB/s", 1e-9},
                    casts);
}

}  // namespace
}  // namespace ember::bench

int main(int argc, char** argv) {
  ember::bench::register_all();
  ember::bench::RecordingReporter reporter;
  if (!ember::bench::run_benchmarks(argc, argv, reporter)) return 1;
  ember::bench::print_summary(reporter);
  return 0;
}
