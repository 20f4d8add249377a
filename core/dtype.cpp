// DType names, sizes and the promotion lattice.
#include "core/dtype.h"

namespace ember {

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "float32";
    case DType::f64: return "float64";
    case DType::f16: return "float16";
    case DType::bf16: return "bfloat16";
    case DType::i32: return "int32";
    case DType::i64: return "int64";
    case DType::boolean: return "bool";
  }
  return "unknown";
}

// PyTorch's table: bool < integers < floating; within floats, the wider wins,
// except that f16 and bf16 (neither contains the other) meet at f32.
DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if (a == DType::boolean) return b;
  if (b == DType::boolean) return a;
  bool a_float = is_floating(a), b_float = is_floating(b);
  if (a_float != b_float) return a_float ? a : b;
  if (!a_float) return DType::i64;  // i32 with i64
  auto rank = [](DType d) { return d == DType::f64 ? 3 : d == DType::f32 ? 2 : 1; };
  if (rank(a) == 1 && rank(b) == 1) return DType::f32;  // f16 with bf16
  return rank(a) > rank(b) ? a : b;
}

}  // namespace ember
