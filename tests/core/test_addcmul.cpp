// addcmul (input + value * tensor1 * tensor2) against the reference kernels:
// every dtype, three-way broadcasting, non-contiguous layouts, promotion, the
// large parallel path, exact hand values and bad inputs.
#include <limits>

#include "support/test_support.h"

namespace ember::testing {
namespace {

Scalar value_for(DType dtype) { return is_floating(dtype) ? Scalar(-0.75) : Scalar(3); }

struct Shapes {
  Shape input, tensor1, tensor2;
};

const Shapes kShapes[] = {
    {{}, {}, {}},           {{5}, {}, {}},           {{}, {3, 4}, {4}},        {{3, 1}, {1, 4}, {3, 4}},
    {{2, 3, 4}, {4}, {3, 1}}, {{0, 3}, {1, 3}, {3}},   {{1}, {6, 1, 5}, {1, 5}}, {{300, 257}, {300, 257}, {300, 257}},
};

TEST(Addcmul, MatchesReferenceForEveryDtypeShapeAndLayout) {
  for (DType dtype : kAllDTypes) {
    if (dtype == DType::boolean) continue;  // an error, tested below
    for (const Shapes& shapes : kShapes) {
      Tensor input = random_tensor(shapes.input, dtype), tensor1 = random_tensor(shapes.tensor1, dtype);
      Tensor tensor2 = random_tensor(shapes.tensor2, dtype);
      Scalar value = value_for(dtype);
      Tensor expected = reference([&] { return addcmul(input, tensor1, tensor2, value); });
      for (const Layout& l1 : layouts_of(tensor1)) {
        for (const Layout& l2 : layouts_of(tensor2)) {
          EXPECT_TRUE(all_close(addcmul(input, l1.tensor, l2.tensor, value), expected))
              << dtype_name(dtype) << " " << shapes.input.str() << " " << shapes.tensor1.str() << " (" << l1.name
              << ") " << shapes.tensor2.str() << " (" << l2.name << ")";
        }
      }
      for (const Layout& l0 : layouts_of(input))
        EXPECT_TRUE(all_close(addcmul(l0.tensor, tensor1, tensor2, value), expected)) << l0.name;
    }
  }
}

TEST(Addcmul, LargeInputsUseEveryThreadAndMatchReference) {
  set_num_threads(2);
  Tensor a = random_tensor({1 << 17}, DType::f32), b = random_tensor({1 << 17}, DType::f32);
  Tensor c = random_tensor({1 << 17}, DType::f32);
  EXPECT_TRUE(all_close(addcmul(a, b, c, 2), reference([&] { return addcmul(a, b, c, 2); })));
  Tensor wide = random_tensor({512, 300}, DType::bf16), row = random_tensor({300}, DType::bf16);
  EXPECT_TRUE(all_close(addcmul(row, wide.t().contiguous().t(), wide),
                        reference([&] { return addcmul(row, wide, wide); })));
  set_num_threads(1);
}

TEST(Addcmul, ExactValuesAndPromotion) {
  Tensor input = from_vector<float>({1, 2, 3}), tensor1 = from_vector<float>({2, 3, 4});
  Tensor tensor2 = from_vector<float>({0.5f, -1, 2});
  EXPECT_EQ(addcmul(input, tensor1, tensor2).to_vector<float>(), (std::vector<float>{2, -1, 11}));
  EXPECT_EQ(addcmul(input, tensor1, tensor2, 0.5).to_vector<float>(), (std::vector<float>{1.5f, 0.5f, 7}));
  Tensor ints = from_vector<int32_t>({1, 2, 3});
  EXPECT_EQ(addcmul(ints, ints, ints, 2).to_vector<int32_t>(), (std::vector<int32_t>{3, 10, 21}));
  EXPECT_EQ(addcmul(ints, ints, ones({3}, {.dtype = DType::f16})).dtype(), DType::f16);
  EXPECT_EQ(addcmul(ints, ints, ones({3}, {.dtype = DType::i64})).dtype(), DType::i64);
  EXPECT_EQ(addcmul(ones({3}, {.dtype = DType::bf16}), ints, ones({3}, {.dtype = DType::f16})).dtype(), DType::f32);
  Tensor big = full({1}, std::numeric_limits<int32_t>::max(), {.dtype = DType::i32});
  EXPECT_EQ(addcmul(big, ones({1}, {.dtype = DType::i32}), ones({1}, {.dtype = DType::i32})).item<int32_t>(),
            std::numeric_limits<int32_t>::min());
}

TEST(Addcmul, BadInputsNameTheOpAndValues) {
  EXPECT_EMBER_ERROR(addcmul(zeros({2, 3}), zeros({4, 3}), zeros({3})),
                     "addcmul: shapes [2, 3] and [4, 3] cannot be broadcast");
  EXPECT_EMBER_ERROR(addcmul(zeros({2, 3}), zeros({3}), zeros({5})), "addcmul: shapes [2, 3] and [5]");
  Tensor flags = ones({2}, {.dtype = DType::boolean});
  EXPECT_EMBER_ERROR(addcmul(flags, flags, flags), "addcmul: not supported for bool");
  Tensor ints = ones({2}, {.dtype = DType::i64});
  EXPECT_EMBER_ERROR(addcmul(ints, ints, ints, 0.5), "addcmul: value 0.5 is a floating-point number");
  EXPECT_EMBER_ERROR(addcmul(Tensor(), zeros({1}), zeros({1})), "addcmul: undefined");
}

}  // namespace
}  // namespace ember::testing
