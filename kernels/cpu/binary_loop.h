// The loop shapes shared by CPU element-wise kernels: dense rows, a broadcast
// scalar on either side, and the general strided row.
#pragma once

#include "core/elementwise_loop.h"

namespace ember::cpu {

template <class Out, class A, class B, class F>
void binary_loop(const ElementwiseLoop& loop, F f) {
  parallel_rows(loop, [&](char** p, const int64_t* s, int64_t n) {
    Out* out = reinterpret_cast<Out*>(p[0]);
    const A* a = reinterpret_cast<const A*>(p[1]);
    const B* b = reinterpret_cast<const B*>(p[2]);
    if (s[0] == 1 && s[1] == 1 && s[2] == 1) {
      for (int64_t i = 0; i < n; ++i) out[i] = f(a[i], b[i]);
    } else if (s[0] == 1 && s[1] == 1 && s[2] == 0) {
      const B scalar = *b;
      for (int64_t i = 0; i < n; ++i) out[i] = f(a[i], scalar);
    } else if (s[0] == 1 && s[1] == 0 && s[2] == 1) {
      const A scalar = *a;
      for (int64_t i = 0; i < n; ++i) out[i] = f(scalar, b[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) out[i * s[0]] = f(a[i * s[1]], b[i * s[2]]);
    }
  });
}

template <class Out, class In, class F>
void unary_loop(const ElementwiseLoop& loop, F f) {
  parallel_rows(loop, [&](char** p, const int64_t* s, int64_t n) {
    Out* out = reinterpret_cast<Out*>(p[0]);
    const In* in = reinterpret_cast<const In*>(p[1]);
    if (s[0] == 1 && s[1] == 1) {
      for (int64_t i = 0; i < n; ++i) out[i] = f(in[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) out[i * s[0]] = f(in[i * s[1]]);
    }
  });
}

}  // namespace ember::cpu
