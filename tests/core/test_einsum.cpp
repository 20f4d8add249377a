// einsum (core/ops/einsum.h): the common equations against the ops they
// stand for, random equations against a naive sum over every assignment of
// the subscripts (random sizes, 0 and 1 included, non-contiguous operands,
// every dtype bmm serves), implicit outputs, broadcasting and the ellipsis,
// and malformed equations, whose errors name the equation and the problem.
#include <map>

#include "support/test_support.h"

namespace ember::testing {
namespace {

// The naive einsum of an equation without ellipsis and with an explicit
// output: for every assignment of the subscripts, add the product of the
// operands' elements to the output element, in double.
Tensor naive_einsum(const std::string& equation, const std::vector<Tensor>& operands) {
  size_t arrow = equation.find("->");
  std::vector<std::string> terms;
  std::string lhs = equation.substr(0, arrow), output = equation.substr(arrow + 2);
  for (size_t start = 0;;) {
    size_t comma = lhs.find(',', start);
    terms.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  std::map<char, int64_t> sizes;
  std::vector<std::vector<double>> values;
  for (size_t i = 0; i < operands.size(); ++i) {
    for (size_t k = 0; k < terms[i].size(); ++k) sizes[terms[i][k]] = std::max(sizes[terms[i][k]], operands[i].shape()[int(k)]);
    values.push_back(operands[i].to(DType::f64).to_vector<double>());
  }
  for (size_t i = 0; i < operands.size(); ++i)  // a size-1 operand dim broadcasts
    for (size_t k = 0; k < terms[i].size(); ++k)
      if (operands[i].shape()[int(k)] == 0) sizes[terms[i][k]] = 0;
  Shape out_shape;
  for (char c : output) out_shape.push_back(sizes[c]);
  std::vector<double> out(size_t(out_shape.numel()), 0.0);
  std::vector<char> letters;
  for (auto& [c, size] : sizes) letters.push_back(c);
  std::map<char, int64_t> at;
  int64_t total = 1;
  for (char c : letters) total *= sizes[c];
  for (int64_t flat = 0; flat < total; ++flat) {
    int64_t rest = flat;
    for (auto it = letters.rbegin(); it != letters.rend(); ++it) {
      at[*it] = rest % sizes[*it];
      rest /= sizes[*it];
    }
    double product = 1;
    for (size_t i = 0; i < operands.size(); ++i) {
      int64_t offset = 0;
      for (size_t k = 0; k < terms[i].size(); ++k) {
        int64_t size = operands[i].shape()[int(k)];
        offset = offset * size + (size == 1 ? 0 : at[terms[i][k]]);
      }
      product *= values[i][size_t(offset)];
    }
    int64_t index = 0;
    for (char c : output) index = index * sizes[c] + at[c];
    out[size_t(index)] += product;
  }
  return from_vector<double>(out, {int64_t(out.size())}).reshape(out_shape);
}

TEST(Einsum, CommonEquationsEqualTheOpsTheyStandFor) {
  Tensor a = random_tensor({3, 4}, DType::f64), b = random_tensor({4, 5}, DType::f64);
  Tensor x = random_tensor({2, 3, 4}, DType::f64), y = random_tensor({2, 4, 5}, DType::f64);
  Tensor square = random_tensor({4, 4}, DType::f64), v = random_tensor({4}, DType::f64), w = random_tensor({4}, DType::f64);
  Tensor q = random_tensor({2, 3, 5, 8}, DType::f64), k = random_tensor({2, 3, 6, 8}, DType::f64);
  EXPECT_TRUE(all_close(einsum("ij,jk->ik", {a, b}), matmul(a, b)));
  EXPECT_TRUE(all_close(einsum("ij,jk", {a, b}), matmul(a, b)));
  EXPECT_TRUE(all_close(einsum("bij,bjk->bik", {x, y}), bmm(x, y)));
  EXPECT_TRUE(all_close(einsum("ii->i", {square}), square.diagonal().contiguous()));
  EXPECT_TRUE(all_close(einsum("ii", {square}), sum(square.diagonal())));
  EXPECT_TRUE(all_close(einsum("ij->ji", {a}), a.t()));
  EXPECT_TRUE(all_close(einsum("ji", {a}), a.t()));  // implicit output: subscripts in alphabetical order
  EXPECT_TRUE(all_close(einsum("i,i->", {v, w}), sum(v * w)));
  EXPECT_TRUE(all_close(einsum("i,j->ij", {v, w}), v.unsqueeze(1) * w));
  EXPECT_TRUE(all_close(einsum("ij->", {a}), sum(a)));
  EXPECT_TRUE(all_close(einsum("ij->j", {a}), sum(a, {0})));
  EXPECT_TRUE(all_close(einsum("bhqd,bhkd->bhqk", {q, k}), matmul(q, k.transpose(-1, -2))));
  EXPECT_TRUE(all_close(einsum(" b h q d , b h k d -> b h q k ", {q, k}), matmul(q, k.transpose(-1, -2))));
  // The ellipsis: batch dims broadcast, as in matmul.
  Tensor left = random_tensor({2, 1, 3, 4}, DType::f64), right = random_tensor({5, 4, 2}, DType::f64);
  EXPECT_TRUE(all_close(einsum("...ij,...jk->...ik", {left, right}), matmul(left, right)));
  EXPECT_TRUE(all_close(einsum("...ij,...jk", {left, right}), matmul(left, right)));
  EXPECT_TRUE(all_close(einsum("i...->...", {x}), sum(x, {0})));
  Tensor stacked = random_tensor({2, 3, 3}, DType::f64);
  EXPECT_TRUE(all_close(einsum("...ii->...i", {stacked}), stacked.diagonal(0, -2, -1).contiguous()));
  EXPECT_TRUE(all_close(einsum("bij->ij", {x}), sum(x, {0})));
  EXPECT_TRUE(all_close(einsum("...ij->ij", {x}), sum(x, {0})));  // ellipsis dims left out of the output are summed
}

TEST(Einsum, RandomEquationsMatchANaiveSumForEveryDtypeAndLayout) {
  const std::vector<std::string> equations = {
      "ij,jk->ik", "bij,bjk->bik", "ii->i", "ij->ji", "i,i->", "bhqd,bhkd->bhqk", "ij,ij->ij", "ij,kj->ik",
      "i,j,k->ijk", "abc,cd,db->a", "iij->j", "ij,j->i", "ijk,ikj->k", "ab,ab,ab->",  "ij->", "i,i->i"};
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64}) {
    for (const std::string& equation : equations) {
      for (int trial = 0; trial < 4; ++trial) {
        std::map<char, int64_t> sizes;
        for (char c : equation)
          if (std::isalpha(static_cast<unsigned char>(c)) && !sizes.count(c)) sizes[c] = random_shape(1, 4)[0];
        std::vector<Tensor> operands;
        std::string lhs = equation.substr(0, equation.find("->"));
        std::string term;
        for (size_t i = 0; i <= lhs.size(); ++i) {
          if (i < lhs.size() && lhs[i] != ',') {
            term.push_back(lhs[i]);
            continue;
          }
          Shape shape;
          for (char c : term) shape.push_back(sizes[c]);
          // Every other trial transposes the operand's storage (non-contiguous).
          Tensor t = random_tensor(shape, dtype, -2, 2);
          if (trial % 2 == 1) t = layouts_of(t).back().tensor;
          operands.push_back(t);
          term.clear();
        }
        SCOPED_TRACE(fmt::format("{} {} trial {}", equation, dtype, trial));
        Tensor expected = naive_einsum(equation, operands).to(dtype);
        // Each pairwise contraction rounds to the dtype: the absolute error
        // scales with the sums of |products| (the naive einsum of |operands|).
        std::vector<Tensor> magnitudes;
        for (const Tensor& t : operands) magnitudes.push_back(abs(t.to(DType::f64)));
        Tensor scale = naive_einsum(equation, magnitudes);
        double largest = scale.numel() == 0 ? 1.0 : amax(scale).item<double>() + 1.0;
        double tol = tolerance(dtype) * 2;
        EXPECT_TRUE(all_close(einsum(equation, operands), expected, tol, tol * largest));
      }
    }
  }
}

TEST(Einsum, KeepsTheOperandsDtype) {
  Tensor a = from_vector<int32_t>({1, 2, 3, 4}, {2, 2});
  EXPECT_EQ(einsum("ij->", {a}).dtype(), DType::i32);
  EXPECT_EQ(einsum("ij->", {a}).item<int32_t>(), 10);
  EXPECT_EQ(einsum("ij,jk->ik", {a, a}).dtype(), DType::i32);
}

TEST(Einsum, SizeOneSubscriptsBroadcast) {
  Tensor a = random_tensor({3, 1}, DType::f64), b = random_tensor({4, 5}, DType::f64);
  EXPECT_TRUE(all_close(einsum("ij,jk->ik", {a, b}), naive_einsum("ij,jk->ik", {a, b})));
  EXPECT_TRUE(all_close(einsum("ij,jk->ik", {a, b}), matmul(a.expand({3, 4}), b)));
}

TEST(Einsum, EmptyOperands) {
  Tensor a = zeros({3, 0}), b = zeros({0, 4});
  Tensor out = einsum("ij,jk->ik", {a, b});
  EXPECT_EQ(out.shape(), (Shape{3, 4}));
  EXPECT_TRUE(all_close(out, zeros({3, 4})));
  EXPECT_EQ(einsum("ij,jk->ik", {zeros({0, 2}), zeros({2, 4})}).shape(), (Shape{0, 4}));
  EXPECT_EQ(einsum("i,i->", {zeros({0}), zeros({0})}).item<float>(), 0.0f);
}

TEST(Einsum, MalformedEquationsNameTheEquationAndTheProblem) {
  Tensor a = zeros({2, 3}), b = zeros({3, 4}), v = zeros({3});
  EXPECT_EMBER_ERROR(einsum("ij,jk->ik", {a}), "einsum: 2 input terms but 1 operands (equation 'ij,jk->ik')");
  EXPECT_EMBER_ERROR(einsum("ijk,jk->ik", {a, b}), "operand 0 has 2 dims (shape [2, 3]) but its term 'ijk' has 3 subscripts");
  EXPECT_EMBER_ERROR(einsum("ij,jk->il", {a, b}), "output subscript 'l' does not appear in any input (equation 'ij,jk->il')");
  EXPECT_EMBER_ERROR(einsum("ij,jk->ii", {a, b}), "output subscript 'i' appears more than once");
  EXPECT_EMBER_ERROR(einsum("ij,kj->ik", {a, b}), "subscript 'j' has size 4 in operand 1 but size 3 in operand 0");
  EXPECT_EMBER_ERROR(einsum("i1,jk->ik", {a, b}), "invalid character '1' in the term of operand 0");
  EXPECT_EMBER_ERROR(einsum("i.j,jk->ik", {a, b}), "'.' in the term of operand 0 is not part of an ellipsis");
  EXPECT_EMBER_ERROR(einsum("...i...,jk->ik", {a, b}), "the term of operand 0 has more than one ellipsis");
  EXPECT_EMBER_ERROR(einsum("ij,jk->ik->i", {a, b}), "more than one '->'");
  EXPECT_EMBER_ERROR(einsum("ii->i", {a}), "subscript 'i' is repeated in operand 0 over dims of sizes 2 and 3");
  EXPECT_EMBER_ERROR(einsum("i->", {}), "at least one operand is needed");
  EXPECT_EMBER_ERROR(einsum("ij,j->i", {a, v.to(DType::f64)}), "operands must share one dtype and device");
  EXPECT_EMBER_ERROR(einsum("...ijk->i", {a}), "operand 0 has 2 dims (shape [2, 3]), fewer than the 3 subscripts");
  EXPECT_EMBER_ERROR(einsum("abcdef,ghijk->a", {zeros({1, 1, 1, 1, 1, 1}), zeros({1, 1, 1, 1, 1})}),
                     "0 ellipsis dims and 11 distinct subscripts make 11 dims; ember supports at most 10");
}

}  // namespace
}  // namespace ember::testing
