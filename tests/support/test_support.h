// Shared helpers for the test suites: random tensors in several memory
// layouts, comparison with per-dtype tolerances, and running an op through
// the reference kernels (the oracle).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <ember/ember.h>

#include "support/tolerance.h"

namespace ember::testing {

// Deterministic per-test random source.
std::mt19937_64& rng();

// A contiguous tensor of `shape` with random values: floats in [lo, hi),
// integers in [lo, hi], bools half true.
Tensor random_tensor(const Shape& shape, DType dtype, double lo = -2.0, double hi = 2.0);

// The same logical values in different memory layouts: contiguous, transposed
// storage, a step-2 slice of a larger tensor, and (when a dim is 1) expanded.
struct Layout {
  std::string name;
  Tensor tensor;
};
std::vector<Layout> layouts_of(const Tensor& t);

// Random shapes with `ndim` dims of size [0, max_size], biased toward small sizes and 1s.
Shape random_shape(int ndim, int64_t max_size = 6);

// Asserts same shape and dtype and values within tolerance (nan matches nan).
::testing::AssertionResult all_close(const Tensor& actual, const Tensor& expected, double rtol = -1, double atol = -1);

// Asserts same shape, dtype and bytes (both undefined counts as equal): for
// results that must not change by even a rounding.
::testing::AssertionResult bitwise_equal(const Tensor& actual, const Tensor& expected);

// A fresh directory named after the running test (and the process), removed
// with the object.
class ScratchDirectory {
 public:
  ScratchDirectory();
  ~ScratchDirectory();
  ScratchDirectory(const ScratchDirectory&) = delete;
  ScratchDirectory& operator=(const ScratchDirectory&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// Runs `fn` with the reference kernels, the oracle of every test.
template <class F>
auto reference(F&& fn) {
  ReferenceModeGuard guard;
  return fn();
}

// Asserts that `fn` throws ember::Error whose message contains `fragment`.
#define EXPECT_EMBER_ERROR(statement, fragment)                                                   \
  do {                                                                                            \
    try {                                                                                         \
      statement;                                                                                  \
      ADD_FAILURE() << "expected ember::Error containing '" << (fragment) << "'";                 \
    } catch (const ::ember::Error& e) {                                                           \
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << "message: " << e.what(); \
    }                                                                                             \
  } while (0)

}  // namespace ember::testing
