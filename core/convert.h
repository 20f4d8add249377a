// Converting one element between dtypes, as kernels do it. Floating to integer
// truncates toward zero like a C++ cast, but is defined for every input: nan
// gives 0 and out-of-range values saturate (a bare cast would be undefined
// behaviour). Anything to bool is "!= 0".
#pragma once

#include <cmath>
#include <limits>
#include <type_traits>

#include "core/dtype.h"

namespace ember {

template <class To, class From>
inline To convert(From value) {
  using In = ComputeType<From>;
  In v = static_cast<In>(value);
  if constexpr (std::is_same_v<To, bool>) {
    return v != In(0);
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<In>) {
    if (std::isnan(v)) return 0;
    if (v <= In(std::numeric_limits<To>::lowest())) return std::numeric_limits<To>::lowest();
    if (v >= In(std::numeric_limits<To>::max())) return std::numeric_limits<To>::max();
    return static_cast<To>(v);
  } else {
    return To(static_cast<ComputeType<To>>(v));
  }
}

}  // namespace ember
