// multinomial: frequencies of a fixed-seed run against the exact
// probabilities (chi-square with a loose bound that a wrong distribution
// fails by orders of magnitude), samples without replacement unique and
// renormalised, reproducibility from a seed, equality across input dtypes
// and with the reference kernels, and every error torch.multinomial raises.
#include <set>

#include "support/test_support.h"

namespace ember::testing {
namespace {

// sum over categories of (observed - expected)^2 / expected, for `samples` (i64) drawn from `probabilities`.
double chi_square(const std::vector<int64_t>& samples, const std::vector<double>& probabilities) {
  std::vector<double> counts(probabilities.size(), 0);
  for (int64_t s : samples) counts.at(size_t(s)) += 1;
  double statistic = 0;
  for (size_t c = 0; c < probabilities.size(); ++c) {
    if (probabilities[c] == 0) {
      EXPECT_EQ(counts[c], 0) << "category " << c << " has no weight but was drawn";
      continue;
    }
    const double expected = probabilities[c] * double(samples.size());
    statistic += (counts[c] - expected) * (counts[c] - expected) / expected;
  }
  return statistic;
}

// With 3 to 4 degrees of freedom a chi-square above 30 has probability below 1e-5;
// a distribution off by a few percent on 20000 draws scores in the hundreds.
constexpr double kChiSquareBound = 30;

TEST(Multinomial, WithReplacementFollowsTheWeights) {
  Generator generator(11);
  Tensor weights = from_vector<float>({1, 2, 0, 3, 4});  // unnormalised
  Tensor samples = multinomial(weights, 20000, true, &generator);
  EXPECT_EQ(samples.shape(), (Shape{20000}));
  EXPECT_EQ(samples.dtype(), DType::i64);
  EXPECT_LT(chi_square(samples.to_vector<int64_t>(), {0.1, 0.2, 0, 0.3, 0.4}), kChiSquareBound);
  // rows of a 2-d input each follow their own weights
  Tensor rows = from_vector<double>({5, 0, 5, 0, 0, 1, 3, 0}, {2, 4});
  Tensor drawn = multinomial(rows, 10000, true, &generator);
  EXPECT_EQ(drawn.shape(), (Shape{2, 10000}));
  EXPECT_LT(chi_square(drawn.select(0, 0).to_vector<int64_t>(), {0.5, 0, 0.5, 0}), kChiSquareBound);
  EXPECT_LT(chi_square(drawn.select(0, 1).to_vector<int64_t>(), {0, 0.25, 0.75, 0}), kChiSquareBound);
  // one category with weight between zero-weight ones: always that one
  for (bool replacement : {true, false})
    EXPECT_EQ(multinomial(from_vector<float>({0, 0, 3, 0}).unsqueeze(0).expand({500, 4}), 1, replacement, &generator)
                  .to_vector<int64_t>(),
              std::vector<int64_t>(500, 2));
}

// Without replacement: the first draw follows p, the second P(j) = sum_{i != j} p_i p_j / (1 - p_i)
// (the weights renormalised after removing the first), and no row repeats a category.
TEST(Multinomial, WithoutReplacementRenormalisesAndNeverRepeats) {
  Generator generator(5);
  const std::vector<double> p = {0.1, 0.2, 0.3, 0.4};
  Tensor weights = from_vector<float>({1, 2, 3, 4}).unsqueeze(0).expand({20000, 4});  // broadcast rows
  Tensor samples = multinomial(weights, 2, false, &generator);
  ASSERT_EQ(samples.shape(), (Shape{20000, 2}));
  std::vector<double> second(4, 0);
  for (size_t j = 0; j < 4; ++j)
    for (size_t i = 0; i < 4; ++i)
      if (i != j) second[j] += p[i] * p[j] / (1 - p[i]);
  EXPECT_LT(chi_square(samples.select(1, 0).contiguous().to_vector<int64_t>(), p), kChiSquareBound);
  EXPECT_LT(chi_square(samples.select(1, 1).contiguous().to_vector<int64_t>(), second), kChiSquareBound);
  EXPECT_EQ(sum(eq(samples.select(1, 0), samples.select(1, 1))).item<int64_t>(), 0);
  // as many samples as nonzero categories: a permutation of them, never the zero-weight one
  Tensor all = multinomial(from_vector<double>({0.5, 0, 2, 1, 3}).unsqueeze(0).expand({300, 5}), 4, false, &generator);
  for (int64_t r = 0; r < 300; ++r) {
    std::vector<int64_t> row = all.select(0, r).to_vector<int64_t>();
    EXPECT_EQ(std::set<int64_t>(row.begin(), row.end()), (std::set<int64_t>{0, 2, 3, 4})) << "row " << r;
  }
}

TEST(Multinomial, ReproducibleFromASeedAndEqualAcrossDtypesAndKernels) {
  Tensor weights = from_vector<double>({1, 0.5, 2, 0, 4, 0.25, 1, 3}, {2, 4});
  for (bool replacement : {true, false}) {
    Generator a(42), b(42);
    Tensor first = multinomial(weights, 3, replacement, &a);
    EXPECT_EQ(first.to_vector<int64_t>(), multinomial(weights, 3, replacement, &b).to_vector<int64_t>());
    // the generator moves on: the next call draws fresh samples
    Tensor next = multinomial(repeat(weights, {50, 1}), 3, replacement, &a);
    Generator c(42);
    multinomial(weights, 3, replacement, &c);
    EXPECT_EQ(next.to_vector<int64_t>(),
              multinomial(repeat(weights, {50, 1}), 3, replacement, &c).to_vector<int64_t>());
    for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {  // the weights are exact in each
      Generator d(42);
      EXPECT_EQ(multinomial(weights.to(dtype), 3, replacement, &d).to_vector<int64_t>(), first.to_vector<int64_t>())
          << dtype_name(dtype);
    }
    Tensor oracle = reference([&] {
      Generator e(42);
      return multinomial(weights, 3, replacement, &e);
    });
    EXPECT_EQ(oracle.to_vector<int64_t>(), first.to_vector<int64_t>());
  }
  EXPECT_EQ(multinomial(zeros({0, 3}), 2).shape(), (Shape{0, 2}));
}

TEST(Multinomial, BadWeightsAndCountsAreErrors) {
  EXPECT_EMBER_ERROR(multinomial(from_vector<float>({1, -1, 2}), 1), "weight -1 at row 0, category 1");
  EXPECT_EMBER_ERROR(multinomial(from_vector<float>({1, INFINITY}), 1), "inf, nan or element < 0");
  EXPECT_EMBER_ERROR(multinomial(from_vector<double>({1, 2, NAN, 1}, {2, 2}), 1), "at row 1, category 0");
  EXPECT_EMBER_ERROR(multinomial(from_vector<float>({1, 2, 0, 0}, {2, 2}), 1, true),
                     "sum of probabilities <= 0) in row 1");
  EXPECT_EMBER_ERROR(multinomial(zeros({0}), 1, true), "sum of probabilities <= 0");
  EXPECT_EMBER_ERROR(multinomial(ones({3}), 4), "cannot sample n_sample > prob_dist.size(-1) samples without replacement");
  EXPECT_EMBER_ERROR(multinomial(from_vector<float>({1, 0, 1}), 3), "cannot draw 3 samples without replacement from row 0");
  EXPECT_EMBER_ERROR(multinomial(ones({3}), 0, true), "n_sample <= 0");
  EXPECT_EMBER_ERROR(multinomial(ones({2, 2, 2}), 1), "prob_dist must be 1 or 2 dim");
  EXPECT_EMBER_ERROR(multinomial(ones({3}, {.dtype = DType::i64}), 1), "expected a floating dtype, got int64");
  EXPECT_EQ(multinomial(ones({3}), 7, true).numel(), 7);  // with replacement, more samples than categories
}

}  // namespace
}  // namespace ember::testing
