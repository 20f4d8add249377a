// Helpers for the test suites (see test_support.h).
#include "support/test_support.h"

#include <unistd.h>

#include <cmath>
#include <cstring>

namespace ember::testing {

std::mt19937_64& rng() {
  static std::mt19937_64 engine(12345);
  return engine;
}

Tensor random_tensor(const Shape& shape, DType dtype, double lo, double hi) {
  std::vector<double> values(size_t(shape.numel()));
  if (dtype == DType::boolean) {
    std::bernoulli_distribution coin(0.5);
    for (double& v : values) v = coin(rng());
  } else if (is_integral(dtype)) {
    std::uniform_int_distribution<int64_t> uniform(int64_t(std::floor(lo)), int64_t(std::floor(hi)));
    for (double& v : values) v = double(uniform(rng()));
  } else {
    std::uniform_real_distribution<double> uniform(lo, hi);
    for (double& v : values) v = uniform(rng());
  }
  return from_vector(values).reshape(shape).to(dtype);
}

std::vector<Layout> layouts_of(const Tensor& t) {
  std::vector<Layout> out{{"contiguous", t.contiguous()}};
  if (t.dim() >= 2) {
    Tensor transposed = t.transpose(0, t.dim() - 1).contiguous().transpose(0, t.dim() - 1);
    out.push_back({"transposed", transposed});
  }
  if (t.dim() >= 1) {
    Shape wide = t.shape();
    wide[wide.ndim() - 1] *= 2;
    Tensor base = zeros(wide, {.dtype = t.dtype()});
    Tensor strided = base.slice(-1, 0, wide.back(), 2);
    strided.copy_(t);
    out.push_back({"step2", strided});
  }
  for (int d = 0; d < t.dim(); ++d) {
    if (t.shape()[d] != 1) continue;
    Shape one = t.shape();
    Tensor expanded = t.contiguous().expand(one);
    out.push_back({"expanded", expanded});
    break;
  }
  return out;
}

Shape random_shape(int ndim, int64_t max_size) {
  std::uniform_int_distribution<int64_t> size(0, max_size);
  std::bernoulli_distribution one(0.2), zero(0.05);
  Shape shape;
  for (int d = 0; d < ndim; ++d) shape.push_back(zero(rng()) ? 0 : one(rng()) ? 1 : std::max<int64_t>(1, size(rng())));
  return shape;
}

::testing::AssertionResult bitwise_equal(const Tensor& actual, const Tensor& expected) {
  if (!actual.defined() || !expected.defined())
    return actual.defined() == expected.defined() ? ::testing::AssertionSuccess()
                                                  : ::testing::AssertionFailure() << "one tensor is undefined";
  if (actual.shape() != expected.shape() || actual.dtype() != expected.dtype())
    return ::testing::AssertionFailure() << "shape/dtype " << fmt::format("{} {}", actual.shape(), actual.dtype())
                                         << " vs " << fmt::format("{} {}", expected.shape(), expected.dtype());
  Tensor a = actual.contiguous(), b = expected.contiguous();
  if (std::memcmp(a.data_ptr(), b.data_ptr(), size_t(a.nbytes())) != 0)
    return ::testing::AssertionFailure() << "the bytes differ";
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult all_close(const Tensor& actual, const Tensor& expected, double rtol, double atol) {
  if (!actual.defined() || !expected.defined())
    return ::testing::AssertionFailure() << (actual.defined() ? "expected" : "actual") << " tensor is undefined";
  if (actual.shape() != expected.shape())
    return ::testing::AssertionFailure() << "shape " << actual.shape().str() << " vs expected " << expected.shape().str();
  if (actual.dtype() != expected.dtype())
    return ::testing::AssertionFailure() << "dtype " << dtype_name(actual.dtype()) << " vs expected "
                                         << dtype_name(expected.dtype());
  if (rtol < 0) rtol = tolerance(actual.dtype());
  if (atol < 0) atol = tolerance(actual.dtype());
  std::vector<double> a = actual.to_vector<double>(), e = expected.to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(e[i])) continue;
    if (a[i] == e[i]) continue;
    if (std::abs(a[i] - e[i]) <= atol + rtol * std::abs(e[i])) continue;
    return ::testing::AssertionFailure() << "element " << i << ": " << a[i] << " vs expected " << e[i] << " (shape "
                                         << actual.shape().str() << ", dtype " << dtype_name(actual.dtype()) << ")";
  }
  return ::testing::AssertionSuccess();
}

ScratchDirectory::ScratchDirectory() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  path_ = std::filesystem::temp_directory_path() /
          fmt::format("ember_{}_{}_{}", info->test_suite_name(), info->name(), ::getpid());
  std::filesystem::remove_all(path_);
  std::filesystem::create_directories(path_);
}

ScratchDirectory::~ScratchDirectory() { std::filesystem::remove_all(path_); }

}  // namespace ember::testing
