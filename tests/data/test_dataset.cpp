// Datasets: TensorDataset's get and one-gather get_batch against per-example
// get + stack, default_collate, Subset, and random_split as PyTorch splits.
#include <ember/ember.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "support/test_support.h"

namespace ember::data {
namespace {

using ember::testing::all_close;

// inputs[i] = [i, i + 0.5, i + 0.25], targets[i] = 10 i.
TensorDataset small_dataset(int64_t n) {
  std::vector<float> inputs;
  std::vector<int64_t> targets;
  for (int64_t i = 0; i < n; ++i) {
    inputs.insert(inputs.end(), {float(i), float(i) + 0.5f, float(i) + 0.25f});
    targets.push_back(10 * i);
  }
  return TensorDataset(from_vector(inputs, {n, 3}), from_vector(targets));
}

TEST(Dataset, TensorDatasetGetSelectsRowsAndBindsAsInputTarget) {
  TensorDataset dataset = small_dataset(4);
  EXPECT_EQ(dataset.size(), 4);
  auto [input, target] = dataset.get(2);
  EXPECT_EQ(input.to_vector<float>(), (std::vector<float>{2.0f, 2.5f, 2.25f}));
  EXPECT_EQ(target.dim(), 0);
  EXPECT_EQ(target.item<int64_t>(), 20);
  EXPECT_EMBER_ERROR(dataset.get(4), "index 4 is out of range for a dataset of size 4");
  EXPECT_EMBER_ERROR(dataset.get(-1), "index -1 is out of range");
}

TEST(Dataset, TensorDatasetGetBatchEqualsStackedGets) {
  TensorDataset dataset = small_dataset(6);
  std::vector<int64_t> indices = {5, 0, 3, 3};
  Example batch = dataset.get_batch(indices);
  // The base class's per-example path: get each, default_collate.
  Example reference = dataset.Dataset::get_batch(indices);
  EXPECT_EQ(batch.input.shape(), (Shape{4, 3}));
  EXPECT_EQ(batch.target.shape(), (Shape{4}));
  EXPECT_TRUE(all_close(batch.input, reference.input));
  EXPECT_TRUE(all_close(batch.target, reference.target));
  EXPECT_EQ(batch.target.to_vector<int64_t>(), (std::vector<int64_t>{50, 0, 30, 30}));
  EXPECT_EMBER_ERROR(dataset.get_batch({1, 6}), "index 6 is out of range");
}

TEST(Dataset, TensorDatasetOfOneAndOfThreeTensors) {
  TensorDataset inputs_only({arange(0, 6).reshape({3, 2})});
  Example example = inputs_only.get(1);
  EXPECT_EQ(example.input.to_vector<int64_t>(), (std::vector<int64_t>{2, 3}));
  EXPECT_FALSE(example.target.defined());
  EXPECT_FALSE(inputs_only.get_batch({0, 2}).target.defined());
  EXPECT_FALSE(inputs_only.Dataset::get_batch({0, 2}).target.defined());

  TensorDataset three({arange(0, 3), arange(10, 13), arange(20, 26).reshape({3, 2})});
  Example batch = three.get_batch({2, 0});
  ASSERT_EQ(batch.extra.size(), 1u);
  EXPECT_EQ(batch.extra[0].to_vector<int64_t>(), (std::vector<int64_t>{24, 25, 20, 21}));
  Example collated = three.Dataset::get_batch({2, 0});
  ASSERT_EQ(collated.extra.size(), 1u);
  EXPECT_TRUE(all_close(collated.extra[0], batch.extra[0]));
}

TEST(Dataset, TensorDatasetRejectsMismatchedTensors) {
  EXPECT_EMBER_ERROR(TensorDataset(zeros({3, 2}), zeros({4})), "size mismatch between tensors");
  EXPECT_EMBER_ERROR(TensorDataset(std::vector<Tensor>{}), "at least one tensor");
  EXPECT_EMBER_ERROR(TensorDataset({scalar_tensor(1, {})}), "0-d");
}

TEST(Dataset, DefaultCollateStacksAlongANewDimZero) {
  std::vector<Example> examples = {{from_vector<float>({1, 2}), scalar_tensor(3, {.dtype = DType::i64}), {}},
                                   {from_vector<float>({4, 5}), scalar_tensor(6, {.dtype = DType::i64}), {}}};
  Example batch = default_collate(examples);
  EXPECT_EQ(batch.input.shape(), (Shape{2, 2}));
  EXPECT_EQ(batch.input.to_vector<float>(), (std::vector<float>{1, 2, 4, 5}));
  EXPECT_EQ(batch.target.to_vector<int64_t>(), (std::vector<int64_t>{3, 6}));
  examples[1].target = Tensor();
  EXPECT_EMBER_ERROR(default_collate(examples), "field 'target' is defined in 1 of 2 examples");
  EXPECT_EMBER_ERROR(default_collate({}), "at least one example");
}

TEST(Dataset, SubsetMapsIndicesAndBatchesThroughTheParent) {
  auto parent = std::make_shared<TensorDataset>(small_dataset(10));
  Subset subset(parent, {7, 2, 9});
  EXPECT_EQ(subset.size(), 3);
  EXPECT_EQ(subset.get(1).target.item<int64_t>(), 20);
  EXPECT_EQ(subset.get_batch({2, 0}).target.to_vector<int64_t>(), (std::vector<int64_t>{90, 70}));
  EXPECT_EMBER_ERROR(subset.get(3), "index 3 is out of range for a dataset of size 3");
  EXPECT_EMBER_ERROR(Subset(parent, {10}), "index 10 is out of range for a dataset of size 10");
}

std::vector<int64_t> all_indices(const std::vector<Subset>& subsets) {
  std::vector<int64_t> indices;
  for (const Subset& subset : subsets) indices.insert(indices.end(), subset.indices().begin(), subset.indices().end());
  return indices;
}

TEST(Dataset, RandomSplitByLengthsIsADisjointCoverReproducibleByGenerator) {
  TensorDataset dataset = small_dataset(10);
  Generator generator(0), same(0), other(1);
  std::vector<Subset> parts = random_split(dataset, {7, 3}, &generator);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].size(), 7);
  EXPECT_EQ(parts[1].size(), 3);
  std::vector<int64_t> indices = all_indices(parts);
  std::vector<int64_t> sorted = indices;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> expected(10);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(sorted, expected);
  EXPECT_NE(indices, expected);
  EXPECT_EQ(all_indices(random_split(dataset, {7, 3}, &same)), indices);
  EXPECT_NE(all_indices(random_split(dataset, {7, 3}, &other)), indices);
  // The subsets read the parent's examples.
  EXPECT_EQ(parts[1].get(0).target.item<int64_t>(), 10 * parts[1].indices()[0]);
}

TEST(Dataset, RandomSplitByFractionsHandsTheRemainderOutFromTheFirst) {
  // PyTorch: floor(10 * 0.25) = 2 each, remainder 4 goes round-robin: 3, 3, 2, 2.
  TensorDataset dataset = small_dataset(10);
  Generator generator(5);
  std::vector<Subset> parts = random_split(dataset, {0.25, 0.25, 0.25, 0.25}, &generator);
  ASSERT_EQ(parts.size(), 4u);
  EXPECT_EQ(parts[0].size(), 3);
  EXPECT_EQ(parts[1].size(), 3);
  EXPECT_EQ(parts[2].size(), 2);
  EXPECT_EQ(parts[3].size(), 2);
  std::vector<Subset> halves = random_split(dataset, {0.7, 0.3}, &generator);
  EXPECT_EQ(halves[0].size(), 7);
  EXPECT_EQ(halves[1].size(), 3);
}

TEST(Dataset, RandomSplitRejectsBadLengths) {
  TensorDataset dataset = small_dataset(10);
  EXPECT_EMBER_ERROR(random_split(dataset, {6, 3}),
                     "sum of input lengths 6, 3 does not equal the length of the input dataset (10)");
  EXPECT_EMBER_ERROR(random_split(dataset, {2.5, 7.5}), "non-negative whole numbers");
  EXPECT_EMBER_ERROR(random_split(dataset, {}), "at least one length");
}

}  // namespace
}  // namespace ember::data
