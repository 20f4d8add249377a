// einsum, reduced to existing differentiable ops (no kernel, no gradient of
// its own): repeated subscripts within an operand become diagonal views;
// every operand is then permuted and unsqueezed onto one list of global dims
// (the ellipsis dims, then each distinct subscript); operands are contracted
// left to right, each pair as one bmm of [batch, left-only, summed] by
// [batch, summed, right-only], after summing away the dims that only one side
// holds and nothing later needs. Tests: tests/core/test_einsum.cpp.
#include "core/ops/einsum.h"

#include <algorithm>
#include <cctype>
#include <string>

#include "core/ops/linalg.h"
#include "core/ops/reduction.h"
#include "core/ops/views.h"

namespace ember {
namespace {

// Throws "einsum: <problem> (equation '<equation>')" unless ok.
template <class... Args>
void check(bool ok, std::string_view equation, fmt::format_string<Args...> problem, Args&&... args) {
  if (!ok) [[unlikely]]
    detail::throw_error(
        fmt::format("einsum: {} (equation '{}')", fmt::format(problem, std::forward<Args>(args)...), equation));
}

// One term of the equation: its subscripts, and where its ellipsis stands
// among them (-1: none).
struct Term {
  std::string labels;
  int ellipsis = -1;
};

Term parse_term(std::string_view text, std::string_view equation, std::string_view which) {
  Term term;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '.') {
      check(text.substr(i, 3) == "...", equation, "'.' in {} is not part of an ellipsis '...'", which);
      check(term.ellipsis < 0, equation, "{} has more than one ellipsis", which);
      term.ellipsis = int(term.labels.size());
      i += 2;
    } else {
      check(std::isalpha(static_cast<unsigned char>(c)) != 0, equation,
            "invalid character '{}' in {} (subscripts are letters a-z and A-Z)", c, which);
      term.labels.push_back(c);
    }
  }
  return term;
}

struct Parsed {
  std::vector<Term> inputs;
  Term output;
};

Parsed parse(std::string_view equation, size_t num_operands) {
  std::string text;
  for (char c : equation)
    if (c != ' ') text.push_back(c);
  size_t arrow = text.find("->");
  check(arrow == std::string::npos || text.find("->", arrow + 1) == std::string::npos, equation,
        "more than one '->'");
  std::string_view lhs = std::string_view(text).substr(0, arrow);
  Parsed parsed;
  for (size_t start = 0;;) {
    size_t comma = lhs.find(',', start);
    std::string_view piece = lhs.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    parsed.inputs.push_back(parse_term(piece, equation, fmt::format("the term of operand {}", parsed.inputs.size())));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  check(parsed.inputs.size() == num_operands, equation, "{} input terms but {} operands", parsed.inputs.size(),
        num_operands);
  std::vector<int> counts(128, 0);  // appearances of each subscript over the inputs
  for (const Term& term : parsed.inputs)
    for (char c : term.labels) ++counts[size_t(c)];
  if (arrow != std::string::npos) {
    parsed.output = parse_term(std::string_view(text).substr(arrow + 2), equation, "the output");
    for (char c : parsed.output.labels) {
      check(counts[size_t(c)] > 0, equation, "output subscript '{}' does not appear in any input", c);
      check(std::count(parsed.output.labels.begin(), parsed.output.labels.end(), c) == 1, equation,
            "output subscript '{}' appears more than once", c);
    }
  } else {  // implicit: the ellipsis dims, then the subscripts seen once, in ASCII order (upper case first)
    parsed.output.ellipsis = 0;
    for (int c = 0; c < 128; ++c)
      if (counts[size_t(c)] == 1) parsed.output.labels.push_back(char(c));
  }
  return parsed;
}

// Sums `t` over the global dims in `dims` whose size is not 1, keeping them
// as size 1, in t's dtype (sum widens integers to int64; einsum keeps the
// operands' dtype, as PyTorch's does).
Tensor sum_away(const Tensor& t, const std::vector<int>& dims) {
  Dims reduce;
  for (int d : dims)
    if (t.shape()[d] != 1) reduce.push_back(d);
  return reduce.ndim() == 0 ? t : sum(t, reduce, true).to(t.dtype());
}

// The product of the sizes of `dims` in `shape`, and those sizes in order.
int64_t product(const Shape& shape, const std::vector<int>& dims, Shape* sizes) {
  int64_t n = 1;
  for (int d : dims) {
    n *= shape[d];
    sizes->push_back(shape[d]);
  }
  return n;
}

// a and b on the same N global dims (size 1 where absent); `keep` marks the
// dims a later operand or the output needs. Returns a * b summed over the
// dims both hold and nothing keeps, on the same N dims.
Tensor contract(Tensor a, Tensor b, const std::vector<bool>& keep) {
  const int n = a.dim();
  auto has = [](const Tensor& t, int d) { return t.shape()[d] != 1; };
  std::vector<int> a_alone, b_alone;  // held by one side only and not needed later: summed first
  for (int d = 0; d < n; ++d) {
    if (has(a, d) && !has(b, d) && !keep[d]) a_alone.push_back(d);
    if (has(b, d) && !has(a, d) && !keep[d]) b_alone.push_back(d);
  }
  a = sum_away(a, a_alone);
  b = sum_away(b, b_alone);
  std::vector<int> batch, left, summed, right, absent;
  for (int d = 0; d < n; ++d) {
    if (has(a, d) && has(b, d)) (keep[d] ? batch : summed).push_back(d);
    else if (has(a, d)) left.push_back(d);
    else if (has(b, d)) right.push_back(d);
    else absent.push_back(d);
  }
  auto concat = [](std::initializer_list<const std::vector<int>*> lists) {
    Dims dims;
    for (const auto* list : lists)
      for (int d : *list) dims.push_back(d);
    return dims;
  };
  Shape batch_sizes, left_sizes, summed_sizes, right_sizes;
  int64_t nb = product(a.shape(), batch, &batch_sizes), nl = product(a.shape(), left, &left_sizes);
  int64_t ns = product(a.shape(), summed, &summed_sizes), nr = product(b.shape(), right, &right_sizes);
  // [batch, left, summed] x [batch, summed, right] -> [batch, left, right]
  Tensor a3 = a.permute(concat({&batch, &left, &summed, &right, &absent})).reshape({nb, nl, ns});
  Tensor b3 = b.permute(concat({&batch, &summed, &right, &left, &absent})).reshape({nb, ns, nr});
  Shape unflat = batch_sizes;
  for (int64_t s : left_sizes) unflat.push_back(s);
  for (int64_t s : right_sizes) unflat.push_back(s);
  Tensor out = bmm(a3, b3).reshape(unflat);
  // Back onto the N global dims: the kept dims in increasing order, size 1 elsewhere.
  Dims held = concat({&batch, &left, &right});
  Dims order = Dims::filled(held.ndim(), 0);
  for (int i = 0; i < held.ndim(); ++i)
    order[i] = std::count_if(held.begin(), held.end(), [&](int64_t d) { return d < held[i]; });
  Dims inverse = order;
  for (int i = 0; i < held.ndim(); ++i) inverse[int(order[i])] = i;
  out = out.permute(inverse);
  for (int d = 0; d < n; ++d)
    if (std::find(held.begin(), held.end(), d) == held.end()) out = out.unsqueeze(d);
  return out;
}

}  // namespace

Tensor einsum(std::string_view equation, const std::vector<Tensor>& operands) {
  check(!operands.empty(), equation, "at least one operand is needed");
  Parsed parsed = parse(equation, operands.size());
  // Global dims: the ellipsis dims (as many as the operand with most), then the subscripts in ASCII order.
  int ellipsis_dims = 0;
  for (size_t i = 0; i < operands.size(); ++i) {
    const Tensor& t = operands[i];
    const Term& term = parsed.inputs[i];
    check(t.defined(), equation, "operand {} is undefined", i);
    check(t.dtype() == operands[0].dtype() && t.device() == operands[0].device(), equation,
          "operands must share one dtype and device, got {} on {} (operand 0) and {} on {} (operand {})",
          operands[0].dtype(), operands[0].device(), t.dtype(), t.device(), i);
    int labels = int(term.labels.size());
    if (term.ellipsis < 0)
      check(t.dim() == labels, equation, "operand {} has {} dims (shape {}) but its term '{}' has {} subscripts", i,
            t.dim(), t.shape(), term.labels, labels);
    else
      check(t.dim() >= labels, equation, "operand {} has {} dims (shape {}), fewer than the {} subscripts of its term", i,
            t.dim(), t.shape(), labels);
    ellipsis_dims = std::max(ellipsis_dims, term.ellipsis < 0 ? 0 : t.dim() - labels);
  }
  std::string letters;
  for (const Term& term : parsed.inputs) letters += term.labels;
  std::sort(letters.begin(), letters.end());
  letters.erase(std::unique(letters.begin(), letters.end()), letters.end());
  const int n = ellipsis_dims + int(letters.size());
  check(n <= kMaxDims, equation, "{} ellipsis dims and {} distinct subscripts make {} dims; ember supports at most {}",
        ellipsis_dims, letters.size(), n, kMaxDims);
  auto global_of = [&](char c) { return ellipsis_dims + int(letters.find(c)); };

  // Each operand on the n global dims; sizes checked as they are met.
  std::vector<Tensor> aligned;
  Shape sizes = Shape::filled(n, 1);
  std::vector<int> size_from(size_t(n), -1);  // which operand set sizes[g]
  for (size_t i = 0; i < operands.size(); ++i) {
    Tensor t = operands[i];
    const Term& term = parsed.inputs[i];
    const int own_ellipsis = term.ellipsis < 0 ? 0 : t.dim() - int(term.labels.size());
    std::vector<int> globals;  // the global dim of each of t's dims
    for (int k = 0; k < int(term.labels.size()); ++k) {
      if (k == term.ellipsis)
        for (int e = 0; e < own_ellipsis; ++e) globals.push_back(ellipsis_dims - own_ellipsis + e);
      globals.push_back(global_of(term.labels[size_t(k)]));
    }
    if (term.ellipsis == int(term.labels.size()))
      for (int e = 0; e < own_ellipsis; ++e) globals.push_back(ellipsis_dims - own_ellipsis + e);
    // A subscript repeated within the term: its diagonal (dims p and q become one, last).
    for (size_t p = 0; p < globals.size(); ++p) {
      for (size_t q = p + 1; q < globals.size(); ++q) {
        if (globals[p] != globals[q]) continue;
        char c = letters[size_t(globals[p] - ellipsis_dims)];
        check(t.shape()[int(p)] == t.shape()[int(q)], equation,
              "subscript '{}' is repeated in operand {} over dims of sizes {} and {}", c, i, t.shape()[int(p)],
              t.shape()[int(q)]);
        t = t.diagonal(0, int64_t(p), int64_t(q));
        int g = globals[p];
        globals.erase(globals.begin() + std::ptrdiff_t(q));
        globals.erase(globals.begin() + std::ptrdiff_t(p));
        globals.push_back(g);
        p = size_t(-1);  // start over: the positions moved
        break;
      }
    }
    for (int k = 0; k < t.dim(); ++k) {
      int g = globals[size_t(k)];
      int64_t size = t.shape()[k];
      if (size == 1) continue;
      if (sizes[g] != 1)
        check(sizes[g] == size, equation, "{} has size {} in operand {} but size {} in operand {}",
              g < ellipsis_dims ? fmt::format("ellipsis dim {}", g) : fmt::format("subscript '{}'", letters[size_t(g - ellipsis_dims)]),
              size, i, sizes[g], size_from[size_t(g)]);
      sizes[g] = size;
      size_from[size_t(g)] = int(i);
    }
    // Permute into global order, then a size-1 dim for every global dim t lacks.
    Dims order;
    for (int g = 0; g < n; ++g)
      for (int k = 0; k < t.dim(); ++k)
        if (globals[size_t(k)] == g) order.push_back(k);
    t = t.permute(order);
    for (int g = 0; g < n; ++g)
      if (std::find(globals.begin(), globals.end(), g) == globals.end()) t = t.unsqueeze(g);
    aligned.push_back(t);
  }

  // The output's global dims, in output order.
  std::vector<int> output;
  std::vector<bool> in_output(size_t(n), false);
  for (int k = 0; k <= int(parsed.output.labels.size()); ++k) {
    if (k == parsed.output.ellipsis)
      for (int g = 0; g < ellipsis_dims; ++g) output.push_back(g);
    if (k < int(parsed.output.labels.size())) output.push_back(global_of(parsed.output.labels[size_t(k)]));
  }
  for (int g : output) in_output[size_t(g)] = true;

  // keep[j][g]: dim g is needed after operand j is folded in (by the output or a later operand).
  auto keep_after = [&](size_t j) {
    std::vector<bool> keep = in_output;
    for (size_t k = j + 1; k < aligned.size(); ++k)
      for (int g = 0; g < n; ++g)
        if (aligned[k].shape()[g] != 1) keep[size_t(g)] = true;
    return keep;
  };
  std::vector<bool> keep = keep_after(0);
  std::vector<int> unneeded;
  for (int g = 0; g < n; ++g)
    if (!keep[size_t(g)]) unneeded.push_back(g);
  Tensor result = sum_away(aligned[0], unneeded);
  for (size_t j = 1; j < aligned.size(); ++j) result = contract(result, aligned[j], keep_after(j));

  // Output order; every other dim has size 1 by now.
  Dims order;
  Shape shape;
  for (int g : output) {
    order.push_back(g);
    shape.push_back(result.shape()[g]);
  }
  for (int g = 0; g < n; ++g)
    if (!in_output[size_t(g)]) order.push_back(g);
  return result.permute(order).reshape(shape);
}

}  // namespace ember
