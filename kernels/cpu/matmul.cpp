// CPU matrix product. f32 and bf16 (f32 accumulation) run on oneDNN matmul
// primitives from the cache of kernels/cpu/onednn.h, strided operands described
// to oneDNN as they are (a transposed view is not copied); f16, and bf16 where
// oneDNN lacks it, compute in f32. f64 and the integers use a blocked loop.
// Oracle: kernels/reference/matmul.cpp; tests: tests/core/test_matmul.cpp.
#include <algorithm>
#include <memory>
#include <type_traits>
#include <vector>

#include "core/convert.h"
#include "core/ops/linalg_kernels.h"
#include "core/parallel.h"
#include "core/tensor.h"
#include "kernels/cpu/copy_tiled.h"
#include "kernels/cpu/families.h"
#include "kernels/cpu/onednn.h"

namespace ember::cpu {
namespace {

using dnnl::memory;

// ---- operands in dense buffers ---------------------------------------------

// Whether a GEMM can read the operand in place: one of its matrix strides is 1
// and the other spans the dense dim (a row-major or column-major matrix,
// possibly with padded rows).
bool gemm_readable(const MatrixOperand& o, int64_t rows, int64_t cols) {
  return (o.col_stride == 1 && o.row_stride >= cols) || (o.row_stride == 1 && o.col_stride >= rows);
}

// Copies a [batch..., rows, cols] operand into a fresh row-major buffer of
// element type To. Batch dims the operand broadcasts along stay at stride 0.
template <class To, class From>
MatrixOperand pack(const MatmulProblem& p, const MatrixOperand& source, int64_t rows, int64_t cols, Tensor& buffer) {
  MatrixOperand packed;
  packed.row_stride = cols, packed.col_stride = 1;
  int64_t size = rows * cols;
  for (int d = p.batch_ndim - 1; d >= 0; --d) {
    packed.batch_strides[d] = source.batch_strides[d] == 0 ? 0 : size;
    if (source.batch_strides[d] != 0) size *= p.batch_shape[d];
  }
  buffer = make_tensor({size}, dtype_of<To>);
  packed.data = buffer.data_ptr();
  for (int64_t batch = 0; batch < p.batch_count(); ++batch) {
    const From* in = static_cast<const From*>(source.data) + p.batch_offset(source, batch);
    To* out = static_cast<To*>(packed.data) + p.batch_offset(packed, batch);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j)
        out[i * cols + j] = convert<To>(in[i * source.row_stride + j * source.col_stride]);
  }
  return packed;
}

// The [m, n] addend in a dense f32 buffer of its own broadcast extent.
template <class From>
MatrixOperand pack_bias(const MatmulProblem& p, Tensor& buffer) {
  int64_t rows = p.bias.row_stride == 0 ? 1 : p.m, cols = p.bias.col_stride == 0 ? 1 : p.n;
  MatmulProblem plain;  // no batch dims: the addend is the same for every batch
  MatrixOperand packed = pack<float, From>(plain, p.bias, rows, cols, buffer);
  packed.row_stride = rows == 1 ? 0 : cols;
  packed.col_stride = cols == 1 ? 0 : 1;
  return packed;
}

// ---- oneDNN -----------------------------------------------------------------

struct MatmulEntry : CachedPrimitive {
  bool usable = false;     // false: oneDNN cannot do it well; the caller converts
  bool per_batch = false;  // a 2-d primitive run once per batch index
  // Note [Blocked weights for tall products]: when set, the primitive reads
  // B in oneDNN's blocked layout, which this reorder writes from B as it is.
  std::unique_ptr<CachedPrimitive> weights_reorder;
  size_t blocked_weights_bytes = 0;
};

// Note [Blocked weights for tall products]: oneDNN 2.6's f32 GEMM reads a
// plain B at 0.84-0.94 of the speed it reads B in its own blocked layout
// (format_tag::any), and a reorder into that layout moves k x n elements
// once, against the product's m x n x k multiply-adds. Measured one thread,
// on an Intel Xeon with AVX-512 (bench/RESULTS.md, "Blocked weights"): at
// m = 2048 every GPT shape gains 4-19% with the reorder counted, at m = 1024
// 2-13%, at m = 512 -1 to +5%, at m = 128 (the MLP's batch) it loses 8-20%.
// So 2-d f32 products of at least kBlockedWeightsMinRows rows reorder B on
// each call; nothing is cached, as a weight changes every step. B of more
// than kBlockedWeightsMaxBytes (a vocabulary-sized head) stays plain: the
// reorder would stream it through memory once more for a few percent.
inline constexpr int64_t kBlockedWeightsMinRows = 1024;
inline constexpr size_t kBlockedWeightsMaxBytes = size_t(32) << 20;

bool blocked_weights_worthwhile(const MatmulProblem& p, DType dtype) {
  return dtype == DType::f32 && p.batch_ndim == 0 && p.m >= kBlockedWeightsMinRows &&
         size_t(p.k * p.n) * sizeof(float) <= kBlockedWeightsMaxBytes;
}

PrimitiveCache<MatmulEntry>& matmul_cache() {
  static PrimitiveCache<MatmulEntry> cache(256);
  return cache;
}

PrimitiveKey key_of(const MatmulProblem& p, DType dtype, int threads) {
  PrimitiveKey key;
  key.add(int64_t(dtype)), key.add(threads);
  key.add(p.m), key.add(p.n), key.add(p.k), key.add(p.batch_ndim);
  for (int d = 0; d < p.batch_ndim; ++d) key.add(p.batch_shape[d]);
  for (const MatrixOperand* o : {&p.a, &p.b, &p.bias}) {
    key.add(o->row_stride), key.add(o->col_stride);
    for (int d = 0; d < p.batch_ndim; ++d) key.add(o->batch_strides[d]);
  }
  key.add(p.bias.data != nullptr);
  return key;
}

// The operand as oneDNN sees it: broadcast batch dims (stride 0) become
// size-1 dims, which oneDNN broadcasts; `batched` false drops the batch dims.
memory::desc desc_of(const MatmulProblem& p, const MatrixOperand& o, int64_t rows, int64_t cols,
                     memory::data_type type, bool batched) {
  memory::dims dims, strides;
  int batch_ndim = batched ? p.batch_ndim : 0;
  for (int d = 0; d < batch_ndim; ++d) {
    dims.push_back(o.batch_strides[d] == 0 ? 1 : p.batch_shape[d]);
    strides.push_back(o.batch_strides[d]);
  }
  dims.push_back(rows), dims.push_back(cols);
  strides.push_back(o.row_stride), strides.push_back(o.col_stride);
  // A size-1 dim's stride is irrelevant, but oneDNN wants it to look dense.
  int64_t extent = 1;
  for (size_t d = dims.size(); d-- > 0;) {
    if (dims[d] == 1 && strides[d] == 0) strides[d] = extent;
    extent = std::max(extent, dims[d] * strides[d]);
  }
  return memory::desc(dims, type, strides);
}

// Note [Blocked weights for tall products]: switches `pd` to `blocked`, and
// gives the entry the reorder that feeds it, when oneDNN picked a layout
// other than B's own and a fast kernel for it.
void use_blocked_weights(MatmulEntry& entry, dnnl::matmul::primitive_desc& pd,
                         const dnnl::matmul::primitive_desc& blocked) {
  const memory::desc plain = pd.weights_desc(), layout = blocked.weights_desc();
  if (layout == plain || is_reference_implementation(blocked)) return;
  OnednnThreadsGuard one_thread(1);  // made for the thread count it runs on
  dnnl::reorder::primitive_desc reorder_pd(onednn_engine(), plain, onednn_engine(), layout, onednn_attributes());
  entry.weights_reorder = std::make_unique<CachedPrimitive>();
  entry.weights_reorder->set_primitive(dnnl::reorder(reorder_pd));
  entry.weights_reorder->args.emplace(DNNL_ARG_FROM, memory(plain, onednn_engine(), nullptr));
  entry.weights_reorder->args.emplace(DNNL_ARG_TO, memory(layout, onednn_engine(), nullptr));
  entry.blocked_weights_bytes = layout.get_size();
  pd = blocked;
}

std::shared_ptr<MatmulEntry> make_entry(const MatmulProblem& p, DType dtype) {
  auto entry = std::make_shared<MatmulEntry>();
  memory::data_type type = onednn_type(dtype);
  bool bias = p.bias.data != nullptr;
  int64_t bias_rows = p.bias.row_stride == 0 ? 1 : p.m, bias_cols = p.bias.col_stride == 0 ? 1 : p.n;
  auto try_create = [&](bool batched, bool blocked_weights = false) -> dnnl::matmul::primitive_desc {
    // The bias has no batch strides, so it becomes size-1 batch dims: dst's rank, as oneDNN wants.
    memory::desc bias_desc = bias ? desc_of(p, p.bias, bias_rows, bias_cols, type, batched) : memory::desc();
    memory::desc weights = blocked_weights ? memory::desc({p.k, p.n}, type, memory::format_tag::any)
                                           : desc_of(p, p.b, p.k, p.n, type, batched);
    dnnl::matmul::desc desc(desc_of(p, p.a, p.m, p.k, type, batched), weights, bias_desc,
                            desc_of(p, p.out, p.m, p.n, type, batched));
    return dnnl::matmul::primitive_desc(desc, onednn_attributes(), onednn_engine());
  };
  // oneDNN broadcasts a batch dim of one operand, not of both at once (a
  // [1, 3, m, k] view with stride 0 times another): those run per batch.
  bool both_broadcast = false;
  for (int d = 0; d < p.batch_ndim; ++d)
    both_broadcast |= p.batch_shape[d] > 1 && p.a.batch_strides[d] == 0 && p.b.batch_strides[d] == 0;
  dnnl::matmul::primitive_desc pd;
  try {
    pd = try_create(!both_broadcast);
    entry->per_batch = both_broadcast;
    if (is_reference_implementation(pd) && p.batch_ndim > 0 && !both_broadcast) {
      pd = try_create(false);
      entry->per_batch = true;
    }
  } catch (const dnnl::error& error) {
    if (error.status != dnnl_unimplemented) throw;
    return entry;
  }
  // oneDNN's naive loops are far slower than converting bf16 to f32, or than
  // adding a bias whose broadcast pattern (anything but per-column) its GEMMs lack.
  entry->usable = !is_reference_implementation(pd) || (dtype == DType::f32 && !bias);
  if (!is_reference_implementation(pd) && blocked_weights_worthwhile(p, dtype))
    use_blocked_weights(*entry, pd, try_create(false, true));
  entry->set_primitive(dnnl::matmul(pd));
  for (int arg : {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST})
    entry->args.emplace(arg, memory(pd.query_md(dnnl::query::exec_arg_md, arg), onednn_engine(), nullptr));
  if (bias) entry->args.emplace(DNNL_ARG_BIAS, memory(pd.query_md(dnnl::query::exec_arg_md, DNNL_ARG_BIAS),
                                                      onednn_engine(), nullptr));
  return entry;
}

// Runs `p` (all operands of `dtype`, f32 or bf16) on oneDNN; false when oneDNN
// has no good implementation and the caller must convert to f32.
bool run_onednn(const MatmulProblem& p, DType dtype) {
  // Note [Small primitives run on one thread] (kernels/cpu/onednn.h)
  int threads = onednn_threads(p.batch_count() * p.m * p.n * p.k);
  OnednnThreadsGuard threads_guard(threads);
  std::shared_ptr<MatmulEntry> entry =
      matmul_cache().get(key_of(p, dtype, threads), [&] { return make_entry(p, dtype); });
  if (!entry->usable) return false;
  int64_t element = element_size(dtype);
  auto at = [&](const MatrixOperand& o, int64_t batch) {
    return static_cast<char*>(o.data) + p.batch_offset(o, batch) * element;
  };
  Tensor blocked;  // B in the layout the primitive reads, when it is not B's own
  if (entry->weights_reorder) {
    blocked = make_tensor({int64_t((entry->blocked_weights_bytes + sizeof(float) - 1) / sizeof(float))}, DType::f32);
    // One thread: at two, with OMP_WAIT_POLICY=passive, waking the second
    // thread cost more (0.12 ms) than the whole reorder of a 0.5 MB operand
    // takes on one (0.04-0.06 ms), and a second core adds little to a copy.
    OnednnThreadsGuard one_thread(1);
    entry->weights_reorder->execute({{DNNL_ARG_FROM, p.b.data}, {DNNL_ARG_TO, blocked.data_ptr()}});
  }
  auto weights = [&](int64_t batch) -> void* { return blocked.defined() ? blocked.data_ptr() : at(p.b, batch); };
  int64_t runs = entry->per_batch ? p.batch_count() : 1;
  for (int64_t batch = 0; batch < runs; ++batch) {
    if (p.bias.data) {
      entry->execute({{DNNL_ARG_SRC, at(p.a, batch)}, {DNNL_ARG_WEIGHTS, weights(batch)},
                      {DNNL_ARG_DST, at(p.out, batch)}, {DNNL_ARG_BIAS, p.bias.data}});
    } else {
      entry->execute({{DNNL_ARG_SRC, at(p.a, batch)}, {DNNL_ARG_WEIGHTS, weights(batch)},
                      {DNNL_ARG_DST, at(p.out, batch)}});
    }
  }
  return true;
}

// Adds the [m, n] addend to every batch of out, after the product.
void add_bias(const MatmulProblem& p) {
  const float* bias = static_cast<const float*>(p.bias.data);
  for (int64_t batch = 0; batch < p.batch_count(); ++batch) {
    float* out = static_cast<float*>(p.out.data) + p.batch_offset(p.out, batch);
    for (int64_t i = 0; i < p.m; ++i)
      for (int64_t j = 0; j < p.n; ++j) out[i * p.n + j] += bias[i * p.bias.row_stride + j * p.bias.col_stride];
  }
}

// Note [Wide products computed transposed]: a short, wide f32 product whose
// B is a transposed view (x @ W^T: a Linear's forward at batch 16-128 with
// 1024 or more outputs) runs as C^T = B^T A^T, a product of n >= 1024 rows, so
// that Note [Blocked weights for tall products] applies: A^T (m x k, small)
// is reordered instead of W (n x k, large). C^T goes into a buffer that is
// then transposed into place (copy_tiled), and the addend added after, as
// oneDNN's GEMMs lack a per-row bias. Measured one thread (raw oneDNN 2.6,
// bench/RESULTS.md "Wide products computed transposed"), reorder and
// transpose counted: 1.06-1.10x at m = 128, 1.2-1.25x at 64, 1.4-1.6x at 16-32;
// a depth k of 256 loses (0.88-0.94 at m = 128), and so does a plain B. On
// two threads the MLP step measured no faster (the two passes after the
// product cost what it saved), so only a product run on one thread takes it.
inline constexpr int64_t kTransposedMinRows = 16, kTransposedMaxRows = 128, kTransposedMinDepth = 512;

bool transposed_worthwhile(const MatmulProblem& p) {
  const bool b_is_transposed = p.b.row_stride == 1 && p.b.col_stride >= p.k;
  return p.batch_ndim == 0 && b_is_transposed && onednn_threads(p.m * p.n * p.k) == 1 &&
         p.m >= kTransposedMinRows && p.m <= kTransposedMaxRows && p.n >= kBlockedWeightsMinRows &&
         p.k >= kTransposedMinDepth;
}

// Note [Wide products computed transposed]; false when oneDNN has no good
// primitive for the transposed product, having written nothing.
bool run_transposed(const MatmulProblem& p) {
  MatmulProblem transposed;
  transposed.m = p.n, transposed.n = p.m, transposed.k = p.k;
  transposed.a = {.data = p.b.data, .row_stride = p.b.col_stride, .col_stride = p.b.row_stride};
  transposed.b = {.data = p.a.data, .row_stride = p.a.col_stride, .col_stride = p.a.row_stride};
  Tensor buffer = make_tensor({p.n, p.m}, DType::f32);
  transposed.out = {.data = buffer.data_ptr(), .row_stride = p.m, .col_stride = 1};
  if (!run_onednn(transposed, DType::f32)) return false;
  ElementwiseLoop loop;
  loop.num_operands = 2, loop.ndim = 2, loop.numel = p.m * p.n;
  loop.shape[0] = p.m, loop.shape[1] = p.n;
  loop.strides[0][0] = p.n, loop.strides[0][1] = 1;  // out: contiguous [m, n]
  loop.strides[1][0] = 1, loop.strides[1][1] = p.m;  // the buffer, read as its transpose
  loop.data[0] = static_cast<char*>(p.out.data), loop.data[1] = static_cast<char*>(buffer.data_ptr());
  loop.dtypes[0] = loop.dtypes[1] = DType::f32;
  const bool tiled = copy_tiled(loop, sizeof(float));
  EMBER_ASSERT(tiled, "a transpose is a tiled copy");
  if (p.bias.data) add_bias(p);
  return true;
}

// The f32 product on oneDNN; an addend oneDNN cannot fuse well is added after.
void run_f32(const MatmulProblem& p) {
  if (transposed_worthwhile(p) && run_transposed(p)) return;
  if (run_onednn(p, DType::f32)) return;
  EMBER_ASSERT(p.bias.data != nullptr, "oneDNN has no f32 matmul for m={} n={} k={}", p.m, p.n, p.k);
  MatmulProblem product = p;
  product.bias = {};
  bool done = run_onednn(product, DType::f32);
  EMBER_ASSERT(done, "oneDNN has no f32 matmul for m={} n={} k={}", p.m, p.n, p.k);
  add_bias(p);
}

// oneDNN reads only GEMM-shaped operands at full speed: others are packed
// first. Returns run(problem) on `p` itself when it needs no packing (the
// common case: copying the problem costs as much as a cache lookup).
template <class T, class Run>
bool run_gemm_readable(const MatmulProblem& p, Run run) {
  bool a_readable = gemm_readable(p.a, p.m, p.k), b_readable = gemm_readable(p.b, p.k, p.n);
  if (a_readable && b_readable) return run(p);
  MatmulProblem packed = p;
  Tensor a_buffer, b_buffer;
  if (!a_readable) packed.a = pack<T, T>(p, p.a, p.m, p.k, a_buffer);
  if (!b_readable) packed.b = pack<T, T>(p, p.b, p.k, p.n, b_buffer);
  return run(packed);
}

// f16, and bf16 without oneDNN support: the same product in f32, one rounding at the end.
template <class T>
void matmul_in_f32(const MatmulProblem& p) {
  MatmulProblem wide = p;
  Tensor a_buffer, b_buffer, bias_buffer;
  wide.a = pack<float, T>(p, p.a, p.m, p.k, a_buffer);
  wide.b = pack<float, T>(p, p.b, p.k, p.n, b_buffer);
  if (p.bias.data) wide.bias = pack_bias<T>(p, bias_buffer);
  Tensor out = make_tensor({p.batch_count() * p.m * p.n}, DType::f32);
  wide.out.data = out.data_ptr();  // the same dense layout as p.out
  run_f32(wide);
  const float* wide_out = out.data_ptr<float>();
  T* narrow_out = static_cast<T*>(p.out.data);
  for (int64_t i = 0; i < out.numel(); ++i) narrow_out[i] = T(wide_out[i]);
}

void matmul_f32(const MatmulProblem& p) {
  run_gemm_readable<float>(p, [](const MatmulProblem& readable) {
    run_f32(readable);
    return true;
  });
}

void matmul_bf16(const MatmulProblem& p) {
  auto run = [](const MatmulProblem& readable) { return run_onednn(readable, DType::bf16); };
  if (onednn_bf16_enabled() && run_gemm_readable<BFloat16>(p, run)) return;
  matmul_in_f32<BFloat16>(p);
}

void matmul_f16(const MatmulProblem& p) { matmul_in_f32<Half>(p); }

// ---- f64 and integers: a cache-blocked loop --------------------------------

// Integers accumulate in the unsigned type of the same width, whose wrap-around
// is defined and gives the same bits as the reference's 64-bit sum truncated.
template <class T>
using Accumulator = typename std::conditional_t<std::is_integral_v<T>, std::make_unsigned<T>,
                                                std::type_identity<T>>::type;

// C[rows, n] = A[rows, k] x B[k, n] (+ bias) with B row-major (col stride 1),
// looping i-k-j so the innermost loop runs over contiguous rows of B and C and
// vectorises; B is walked in [kBlockK, kBlockN] panels that stay in cache.
template <class T>
void blocked_rows(const MatmulProblem& p, const T* a, const T* b, int64_t b_row_stride, T* out, int64_t row_begin,
                  int64_t row_end) {
  using Acc = Accumulator<T>;
  constexpr int64_t kBlockN = 256, kBlockK = 128;
  const Acc* bias = static_cast<const Acc*>(p.bias.data);
  for (int64_t i = row_begin; i < row_end; ++i) {
    Acc* c = reinterpret_cast<Acc*>(out + i * p.n);
    for (int64_t j = 0; j < p.n; ++j) c[j] = bias ? bias[i * p.bias.row_stride + j * p.bias.col_stride] : Acc(0);
  }
  for (int64_t j0 = 0; j0 < p.n; j0 += kBlockN) {
    int64_t j1 = std::min(p.n, j0 + kBlockN);
    for (int64_t l0 = 0; l0 < p.k; l0 += kBlockK) {
      int64_t l1 = std::min(p.k, l0 + kBlockK);
      for (int64_t i = row_begin; i < row_end; ++i) {
        Acc* __restrict c = reinterpret_cast<Acc*>(out + i * p.n);
        for (int64_t l = l0; l < l1; ++l) {
          Acc a_il = Acc(a[i * p.a.row_stride + l * p.a.col_stride]);
          const Acc* __restrict b_row = reinterpret_cast<const Acc*>(b + l * b_row_stride);
          for (int64_t j = j0; j < j1; ++j) c[j] += a_il * b_row[j];
        }
      }
    }
  }
}

template <class T>
void matmul_blocked(const MatmulProblem& p) {
  for (int64_t batch = 0; batch < p.batch_count(); ++batch) {
    const T* a = static_cast<const T*>(p.a.data) + p.batch_offset(p.a, batch);
    const T* b = static_cast<const T*>(p.b.data) + p.batch_offset(p.b, batch);
    T* out = static_cast<T*>(p.out.data) + p.batch_offset(p.out, batch);
    int64_t b_row_stride = p.b.row_stride;
    std::vector<T> packed;
    if (p.b.col_stride != 1) {  // give the inner loop contiguous rows of B
      packed.resize(size_t(p.k * p.n));
      for (int64_t l = 0; l < p.k; ++l)
        for (int64_t j = 0; j < p.n; ++j) packed[size_t(l * p.n + j)] = b[l * p.b.row_stride + j * p.b.col_stride];
      b = packed.data();
      b_row_stride = p.n;
    }
    int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, p.n * p.k));
    parallel_for(0, p.m, grain, [&](int64_t begin, int64_t end) {
      blocked_rows<T>(p, a, b, b_row_stride, out, begin, end);
    });
  }
}

}  // namespace

void register_matmul_kernels() {
  matmul_op.set(DeviceType::cpu, DType::f32, &matmul_f32);
  matmul_op.set(DeviceType::cpu, DType::bf16, &matmul_bf16);
  matmul_op.set(DeviceType::cpu, DType::f16, &matmul_f16);
  register_for<double, int32_t, int64_t>(matmul_op, DeviceType::cpu,
                                         [](auto tag) { return &matmul_blocked<decltype(tag)>; });
}

}  // namespace ember::cpu
