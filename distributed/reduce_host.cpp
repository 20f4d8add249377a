// Element-wise reductions on host buffers, shared by the CPU backends: the
// shared-memory backend's reduction step and Gloo's custom reduce function
// (Debian's Gloo has no bf16 type and f16 only through its own struct); and
// the host backends' default allreduce_into.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "core/arithmetic.h"
#include "core/dtype.h"
#include "core/error.h"
#include "distributed/backend.h"

namespace ember::distributed {
namespace {

template <class T, ReduceOp Op>
void reduce_typed(T* out, const T* a, const T* b, int64_t count) {
  using C = ComputeType<T>;
#pragma omp simd
  for (int64_t i = 0; i < count; ++i) {
    C x = C(a[i]), y = C(b[i]);
    C r;
    if constexpr (Op == ReduceOp::sum) r = x + y;
    else if constexpr (Op == ReduceOp::product) r = x * y;
    // NaN from either side, as torch.max: a ring that combined `own < NaN ? NaN : own`
    // dropped a partial's NaN, so the answer depended on the ranks' order.
    else if constexpr (Op == ReduceOp::max) r = arith::maximum(x, y);
    else r = arith::minimum(x, y);
    out[i] = T(r);
  }
}

void reduce_bool(bool* out, const bool* a, const bool* b, int64_t count, ReduceOp op) {
  for (int64_t i = 0; i < count; ++i) out[i] = op == ReduceOp::max ? (a[i] || b[i]) : (a[i] && b[i]);
}

}  // namespace

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
    case ReduceOp::product: return "product";
  }
  return "?";
}

void Backend::allreduce_into(void* output, std::span<const Piece> pieces, int64_t count, DType dtype, ReduceOp op) {
  auto* at = static_cast<std::byte*>(output);
  for (const Piece& piece : pieces) {
    const auto bytes = size_t(piece.count * element_size(dtype));
    if (bytes > 0 && piece.data != at) std::memcpy(at, piece.data, bytes);
    at += bytes;
  }
  allreduce(output, count, dtype, op);
}

bool host_reduction_supported(DType dtype, ReduceOp op) {
  if (op == ReduceOp::avg) return dtype == DType::f32 || dtype == DType::f64 || dtype == DType::f16 || dtype == DType::bf16;
  if (dtype == DType::boolean) return op == ReduceOp::max || op == ReduceOp::min;
  return true;
}

void reduce_host_buffers(void* out, const void* a, const void* b, int64_t count, DType dtype, ReduceOp op) {
  EMBER_ASSERT(op != ReduceOp::avg, "avg reaches backends as sum");
  if (dtype == DType::boolean) {
    reduce_bool(static_cast<bool*>(out), static_cast<const bool*>(a), static_cast<const bool*>(b), count, op);
    return;
  }
  visit_dtype(dtype, [&]<class T>() {
    if constexpr (!std::is_same_v<T, bool>) {
      auto* o = static_cast<T*>(out);
      auto* x = static_cast<const T*>(a);
      auto* y = static_cast<const T*>(b);
      switch (op) {
        case ReduceOp::sum: reduce_typed<T, ReduceOp::sum>(o, x, y, count); break;
        case ReduceOp::product: reduce_typed<T, ReduceOp::product>(o, x, y, count); break;
        case ReduceOp::max: reduce_typed<T, ReduceOp::max>(o, x, y, count); break;
        case ReduceOp::min: reduce_typed<T, ReduceOp::min>(o, x, y, count); break;
        case ReduceOp::avg: break;
      }
    }
  });
}

}  // namespace ember::distributed
