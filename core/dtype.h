// Element types, their C++ types, and type promotion as PyTorch does it.
#pragma once

#include <cstdint>
#include <string_view>
#include <type_traits>

#include <fmt/format.h>

#include "core/error.h"
#include "core/half.h"

namespace ember {

enum class DType : uint8_t { f32, f64, f16, bf16, i32, i64, boolean };
inline constexpr int kNumDTypes = 7;
inline constexpr DType kAllDTypes[kNumDTypes] = {DType::f32, DType::f64, DType::f16,    DType::bf16,
                                                 DType::i32, DType::i64, DType::boolean};

std::string_view dtype_name(DType dtype);  // "float32", "bfloat16", "bool", ... as PyTorch prints them
constexpr int64_t element_size(DType dtype) {
  switch (dtype) {
    case DType::f32: case DType::i32: return 4;
    case DType::f64: case DType::i64: return 8;
    case DType::f16: case DType::bf16: return 2;
    case DType::boolean: return 1;
  }
  return 0;
}
constexpr bool is_floating(DType d) { return d == DType::f32 || d == DType::f64 || d == DType::f16 || d == DType::bf16; }
constexpr bool is_integral(DType d) { return d == DType::i32 || d == DType::i64; }  // bool excluded
// What kernels accumulate a floating dtype in (row statistics, log-sum-exps,
// attention's running sums): f64 for f64, f32 otherwise (ComputeType's dtype).
constexpr DType accumulation_dtype(DType d) { return d == DType::f64 ? DType::f64 : DType::f32; }

// The dtype of `a op b` for two tensors (PyTorch's promote_types).
DType promote_types(DType a, DType b);

// The C++ type stored for each dtype, and back.
template <DType D> struct CppTypeOf;
template <> struct CppTypeOf<DType::f32> { using type = float; };
template <> struct CppTypeOf<DType::f64> { using type = double; };
template <> struct CppTypeOf<DType::f16> { using type = Half; };
template <> struct CppTypeOf<DType::bf16> { using type = BFloat16; };
template <> struct CppTypeOf<DType::i32> { using type = int32_t; };
template <> struct CppTypeOf<DType::i64> { using type = int64_t; };
template <> struct CppTypeOf<DType::boolean> { using type = bool; };
template <DType D> using CppType = typename CppTypeOf<D>::type;

template <class T> inline constexpr DType dtype_of = DType::f32;
template <> inline constexpr DType dtype_of<double> = DType::f64;
template <> inline constexpr DType dtype_of<Half> = DType::f16;
template <> inline constexpr DType dtype_of<BFloat16> = DType::bf16;
template <> inline constexpr DType dtype_of<int32_t> = DType::i32;
template <> inline constexpr DType dtype_of<int64_t> = DType::i64;
template <> inline constexpr DType dtype_of<bool> = DType::boolean;

// The type arithmetic on T is carried out in: float for the 16-bit types.
template <class T> using ComputeType =
    std::conditional_t<std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>, float, T>;

// Calls f.template operator()<T>() with T the C++ type of `dtype`:
//   visit_dtype(t.dtype(), [&]<class T>() { fill<T>(...); });
template <class F>
decltype(auto) visit_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32: return f.template operator()<float>();
    case DType::f64: return f.template operator()<double>();
    case DType::f16: return f.template operator()<Half>();
    case DType::bf16: return f.template operator()<BFloat16>();
    case DType::i32: return f.template operator()<int32_t>();
    case DType::i64: return f.template operator()<int64_t>();
    case DType::boolean: return f.template operator()<bool>();
  }
  EMBER_ASSERT(false, "unknown dtype {}", int(dtype));
}

}  // namespace ember

template <>
struct fmt::formatter<ember::DType> : fmt::formatter<std::string_view> {
  auto format(ember::DType d, format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(ember::dtype_name(d), ctx);
  }
};
