// Built against the installed package by tests/package/run.cmake.
#include <ember/ember.h>

#include <cstdio>

int main() {
  ember::Tensor a = ember::arange(0, 6, 1, {.dtype = ember::DType::f32}).view({2, 3});
  ember::Tensor b = a + a.slice(1, 0, 1);  // broadcast a column
  std::vector<float> values = b.to_vector<float>();
  bool ok = values == std::vector<float>{0, 1, 2, 6, 7, 8};
  std::printf("%s\n%s\n", b.str().c_str(), ok ? "consumer ok" : "consumer WRONG");
  return ok ? 0 : 1;
}
