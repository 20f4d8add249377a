// Strided copies: contiguous() of a transposed 1024x1024 matrix, of a 3-d and
// of a 4-d (NCHW to NHWC) permute, against a plain copy of the same bytes (a
// clone of a contiguous tensor) in the same run, per element size. The table
// compares bytes moved per second, strided over plain: issue 22's target,
// a strided copy's time within 1.2x of the plain one's, is a ratio >= 0.83.
// Beside them, the dtype conversions autocast runs every step (f32 to bf16 and
// back, 1M elements) against the plain f32 copy, also in bytes moved per
// second: a cast at memory speed comes out near 1.0. And the memory pattern
// alone of a tiled transposing copy (`tile_moves`, below), to show how much
// of the gap to a plain copy is the access pattern's and how much the
// transposing kernel's. Run by
// scripts/bench.sh at 1 and 2 threads; figures go to bench/RESULTS.md.
#include <cstring>
#include <string>
#include <vector>

#include "bench_support.h"
#include "core/ops/creation.h"
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

// Times `copy` (which returns a fresh tensor), reporting `bytes` moved per call per second.
template <class F>
void time_copies(benchmark::State& state, F&& copy, double bytes) {
  warm_up(state, copy);
  for (auto _ : state) {
    Tensor out = copy();
    benchmark::DoNotOptimize(out.data_ptr());
  }
  state.counters["bytes/s"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = get_num_threads();
}

void copy_case(benchmark::State& state, const Case& c, DType dtype) {
  Tensor source = uniform_tensor(c.shape, dtype, 1);
  Tensor view = c.order.ndim() == 0 ? source : permute(source, c.order);
  // The plain copy clones; a view makes contiguous() copy. Both allocate their output.
  auto copy = [&] { return c.order.ndim() == 0 ? clone(view) : contiguous(view); };
  time_copies(state, copy, 2.0 * double(source.nbytes()));
}

// The 1M-element [1024, 1024] source moved to the same places of a fresh
// output, tile by tile: 64 rows of 256 bytes, each tile staged through a
// buffer, rows the tensor's pitch apart on both sides. That is the access
// pattern of kernels/cpu/copy_tiled.cpp's transposing copy of the same
// tensor (whose input and output rows are as far apart) without its
// shuffles: what the transpose would cost if transposing were free.
void tile_moves_case(benchmark::State& state, DType dtype) {
  constexpr int64_t kTileRows = 64, kRunBytes = 256, kBufferPitch = kRunBytes + 64;
  Tensor source = uniform_tensor(kCases[0].shape, dtype, 1);
  const int64_t rows = source.shape()[0], pitch = source.shape()[1] * element_size(dtype);
  const int64_t tiles_j = pitch / kRunBytes, tiles = rows / kTileRows * tiles_j;
  auto move = [&] {
    Tensor out = empty_like(source);
    const char* in = static_cast<const char*>(source.data_ptr());
    char* to = static_cast<char*>(out.data_ptr());
    parallel_for(0, tiles, 1, [&](int64_t begin, int64_t end) {
      alignas(64) char buffer[kTileRows * kBufferPitch];
      for (int64_t tile = begin; tile < end; ++tile) {
        const int64_t offset = tile / tiles_j * kTileRows * pitch + tile % tiles_j * kRunBytes;
        for (int64_t r = 0; r < kTileRows; ++r) std::memcpy(buffer + r * kBufferPitch, in + offset + r * pitch, kRunBytes);
        for (int64_t r = 0; r < kTileRows; ++r) std::memcpy(to + offset + r * pitch, buffer + r * kBufferPitch, kRunBytes);
      }
    });
    return out;
  };
  time_copies(state, move, 2.0 * double(source.nbytes()));
}

std::string tile_moves_name(DType dtype) { return "tile_moves/" + std::string(dtype_name(dtype)); }

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
  time_copies(state, cast, double(source.numel()) * double(element_size(c.from) + element_size(c.to)));
}

void register_all() {
  for (DType dtype : kDTypes)
    for (const Case& c : kCases)
      benchmark::RegisterBenchmark(run_name(c, dtype).c_str(), copy_case, c, dtype)->UseRealTime();
  for (DType dtype : kDTypes)
    benchmark::RegisterBenchmark(tile_moves_name(dtype).c_str(), tile_moves_case, dtype)->UseRealTime();
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
  std::vector<Comparison> floor, against_floor;
  for (DType dtype : kDTypes) {
    floor.push_back({"tile moves " + std::string(dtype_name(dtype)) + " vs plain", tile_moves_name(dtype),
                     run_name(kCases[0], dtype)});
    against_floor.push_back({"transpose " + std::string(dtype_name(dtype)) + " vs tile moves", run_name(kCases[1], dtype),
                             tile_moves_name(dtype)});
  }
  print_ratio_table(reporter, "the access pattern alone: tile moves with no transpose vs plain copy (GB/s)",
                    {"bytes/s", "GB/s", 1e-9}, floor);
  print_ratio_table(reporter, "transpose (ember) vs its access pattern alone (tile moves, GB/s)", {"bytes/s", "GB/s", 1e-9},
                    against_floor);
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
