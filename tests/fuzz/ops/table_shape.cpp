// The op table's shape families: views (reshape, permute, transpose, expand,
// squeeze/unsqueeze, slice, narrow, select, flatten, diagonal, split),
// copies (contiguous, to(dtype)), indexing (index_select, gather,
// scatter_add, cat/stack, masked_fill, embedding, one_hot, tril/triu, repeat,
// pad) and creation (arange, full, eye, linspace, random). Every result must
// match exactly: both sides move the same values.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "fuzz/ops/table_parts.h"

namespace ember::fuzz {
namespace {

constexpr Accuracy kExact = Accuracy::exact;

// A target shape for reshape/view: a mode byte, then sizes.
Shape target_shape(Reader& in, const Tensor& x) {
  switch (in.byte() % 5) {
    case 0: return {-1};
    case 1: return {1, -1};
    case 2: return {-1, x.dim() > 0 ? x.size(-1) : 1};
    case 3: {
      Shape shape = x.shape();
      if (shape.ndim() > 0) shape[int(in.byte() % shape.ndim())] = -1;
      return shape;
    }
    default: {
      Shape shape;
      const int ndim = in.byte() % 4;
      for (int d = 0; d < ndim; ++d) shape.push_back(in.in_range(-2, 7));
      return shape;
    }
  }
}

OpEntry reshape_op() {
  return {"reshape", [](Reader& in, Pool& pool) {
            const bool as_view = in.flag();
            Tensor x = operand(in, pool);
            Shape shape = target_shape(in, x);
            return Call{fmt::format("{} {}", as_view ? "view" : "reshape", shape), {x}, [=](const Inputs& t) {
                          return Outputs{as_view ? t[0].view(shape) : t[0].reshape(shape)};
                        }, kExact};
          }};
}

OpEntry reorder() {
  return {"permute", [](Reader& in, Pool& pool) {
            const uint8_t which = in.byte() % 3;
            Tensor x = operand(in, pool);
            const int64_t d0 = in.dim(x.dim()), d1 = in.dim(x.dim());
            Dims order;
            for (int d = 0; d < x.dim(); ++d) order.push_back(in.dim(x.dim()));
            if (which == 0) return Call{fmt::format("transpose {} {}", d0, d1), {x}, [=](const Inputs& t) {
                                          return Outputs{t[0].transpose(d0, d1)};
                                        }, kExact};
            if (which == 1) return Call{fmt::format("permute {}", order), {x}, [=](const Inputs& t) {
                                          return Outputs{t[0].permute(order)};
                                        }, kExact};
            return Call{"t", {x}, [](const Inputs& t) { return Outputs{t[0].t()}; }, kExact};
          }};
}

OpEntry expand_op() {
  return {"expand", [](Reader& in, Pool& pool) {
            Tensor x = operand(in, pool);
            Shape shape;
            const int lead = in.byte() % 3;
            for (int d = 0; d < lead; ++d) shape.push_back(in.in_range(-1, 3));
            for (int d = 0; d < x.dim(); ++d) {
              const uint8_t b = in.byte();
              shape.push_back(b % 4 == 0 ? x.size(d) : b % 4 == 1 ? -1 : int64_t(b / 4 % 6) - 2);
            }
            return Call{fmt::format("expand {}", shape), {x}, [=](const Inputs& t) { return Outputs{t[0].expand(shape)}; },
                        kExact};
          }};
}

OpEntry squeeze_op() {
  return {"squeeze", [](Reader& in, Pool& pool) {
            const uint8_t which = in.byte() % 3;
            Tensor x = operand(in, pool);
            const int64_t dim = which == 2 ? in.integer(-x.dim() - 1, x.dim()) : in.dim(x.dim());
            static const std::array<const char*, 3> names = {"squeeze", "squeeze_dim", "unsqueeze"};
            return Call{fmt::format("{} {}", names[which], dim), {x}, [=](const Inputs& t) {
                          if (which == 0) return Outputs{t[0].squeeze()};
                          if (which == 1) return Outputs{t[0].squeeze(dim)};
                          return Outputs{t[0].unsqueeze(dim)};
                        }, kExact};
          }};
}

// slice, narrow, select, diagonal, flatten, unflatten, split and chunk.
OpEntry subviews() {
  return {"subview", [](Reader& in, Pool& pool) {
            const uint8_t which = in.byte() % 8;
            Tensor x = operand(in, pool);
            const int64_t dim = in.dim(x.dim()), other = in.dim(x.dim());
            const int64_t a = in.integer(-4, 5), b = in.integer(-4, 7), step = in.integer(0, 3);
            static const std::array<const char*, 8> names = {"slice",   "narrow",    "select", "diagonal",
                                                              "flatten", "unflatten", "split",  "chunk"};
            return Call{fmt::format("{} dim {} other {} a {} b {} step {}", names[which], dim, other, a, b, step), {x},
                        [=](const Inputs& t) {
                          switch (which) {
                            case 0: return Outputs{t[0].slice(dim, a, b, step)};
                            case 1: return Outputs{t[0].narrow(dim, a, b)};
                            case 2: return Outputs{t[0].select(dim, a)};
                            case 3: return Outputs{t[0].diagonal(a, dim, other)};
                            case 4: return Outputs{t[0].flatten(dim, other)};
                            case 5: return Outputs{t[0].unflatten(dim, {a, -1})};
                            case 6: return split(t[0], step, dim);
                            default: return chunk(t[0], step, dim);
                          }
                        }, kExact};
          }};
}

OpEntry copies() {
  return {"copy", [](Reader& in, Pool& pool) {
            const uint8_t which = in.byte() % 3;
            Tensor x = operand(in, pool);
            const DType dtype = in.dtype();
            static const std::array<const char*, 3> names = {"to", "contiguous", "clone"};
            return Call{fmt::format("{} {}", names[which], dtype), {x}, [=](const Inputs& t) {
                          if (which == 0) return Outputs{t[0].to(dtype)};
                          if (which == 1) return Outputs{t[0].contiguous()};
                          return Outputs{t[0].clone()};
                        }, kExact};
          }};
}

// An index for gather/scatter_add: the input's shape with each dim at most its
// size (index byte per dim), any size 0-4 along `dim`, values below the size along dim.
Tensor along_index(Reader& in, const Tensor& x, int64_t dim) {
  Shape shape;
  const int d = x.dim() == 0 ? 0 : int(dim < 0 ? dim + x.dim() : dim);
  for (int k = 0; k < x.dim(); ++k) {
    const int64_t size = in.in_range(0, 4);
    shape.push_back(k == d ? size : std::min(size, x.size(k)));
  }
  const int64_t bound = x.dim() == 0 ? 1 : x.size(d);
  return read_indices(in, shape, bound);
}

OpEntry select_rows() {
  return {"index", [](Reader& in, Pool& pool) {
            const uint8_t which = in.byte() % 3;
            Tensor x = operand(in, pool);
            const int64_t dim = in.dim(x.dim());
            const bool valid_dim = dim >= -std::max(x.dim(), 1) && dim < std::max(x.dim(), 1);
            if (which == 0) {
              const int64_t bound = x.dim() == 0 || !valid_dim ? 1 : x.size(dim);
              Shape shape = in.flag() ? Shape{} : Shape{in.in_range(0, 4)};
              Tensor index = read_indices(in, shape, bound);
              return Call{fmt::format("index_select dim {}", dim), {x, index},
                          [=](const Inputs& t) { return Outputs{index_select(t[0], dim, t[1])}; }, kExact};
            }
            Tensor index = along_index(in, x, valid_dim ? dim : 0);
            if (which == 1)
              return Call{fmt::format("gather dim {}", dim), {x, index},
                          [=](const Inputs& t) { return Outputs{gather(t[0], dim, t[1])}; }, kExact};
            Shape src_shape = index.shape();
            if (in.flag())
              for (int64_t& s : src_shape) s += in.in_range(0, 1);
            Tensor src = read_tensor_of(in, src_shape, in.flag() ? x.dtype() : in.dtype());
            return Call{fmt::format("scatter_add dim {}", dim), {x, index, src},
                        [=](const Inputs& t) { return Outputs{scatter_add(t[0], dim, t[1], t[2])}; },
                        Accuracy::scaled};
          }};
}

OpEntry concatenate() {
  return {"cat", [](Reader& in, Pool& pool) {
            const bool stacked = in.flag();
            Tensor first = operand(in, pool);
            const int64_t dim = in.integer(-first.dim() - 1, first.dim());
            Inputs tensors{first};
            const int more = in.byte() % 3;
            for (int i = 0; i < more; ++i) {
              Shape shape = first.shape();
              const int d = int(in.byte() % std::max(first.dim(), 1));
              if (!stacked && shape.ndim() > 0) shape[d] = in.in_range(0, 3);
              tensors.push_back(in.flag() ? operand(in, pool) : read_tensor_of(in, shape, in.dtype()));
            }
            return Call{fmt::format("{} dim {} of {}", stacked ? "stack" : "cat", dim, tensors.size()), tensors,
                        [=](const Inputs& t) { return Outputs{stacked ? stack(t, dim) : cat(t, dim)}; }, kExact};
          }};
}

OpEntry masked_fill_op() {
  return {"masked_fill", [](Reader& in, Pool& pool) {
            Tensor x = operand(in, pool);
            Tensor mask = in.flag() ? read_mask(in, broadcastable_to(in, x.shape())) : operand(in, pool);
            Scalar value = in.scalar();
            return Call{fmt::format("masked_fill {}", scalar_name(value)), {x, mask},
                        [=](const Inputs& t) { return Outputs{masked_fill(t[0], t[1], value)}; }, kExact};
          }};
}

OpEntry embedding_op() {
  return {"embedding", [](Reader& in, Pool& pool) {
            Tensor weight;
            if (in.flag()) {
              weight = operand(in, pool);
            } else {
              Shape shape{in.in_range(0, 5), in.in_range(0, 4)};
              weight = read_tensor_of(in, shape, in.dtype());
            }
            Tensor indices = read_indices(in, read_shape(in, pool), weight.dim() > 0 ? weight.size(0) : 1);
            return Call{"embedding", {weight, indices}, [](const Inputs& t) { return Outputs{embedding(t[1], t[0])}; },
                        kExact};
          }};
}

OpEntry one_hot_op() {
  return {"one_hot", [](Reader& in, Pool& pool) {
            const int64_t bound = in.in_range(0, 5);
            Tensor indices = in.flag() ? operand(in, pool) : read_indices(in, read_shape(in, pool), bound);
            const int64_t classes = in.in_range(-2, 6);
            return Call{fmt::format("one_hot classes {}", classes), {indices},
                        [=](const Inputs& t) { return Outputs{one_hot(t[0], classes)}; }, kExact};
          }};
}

OpEntry triangle() {
  return {"tril_triu", [](Reader& in, Pool& pool) {
            const bool upper = in.flag();
            Tensor x = operand(in, pool);
            const int64_t diagonal = in.integer(-4, 4);
            return Call{fmt::format("{} {}", upper ? "triu" : "tril", diagonal), {x}, [=](const Inputs& t) {
                          return Outputs{upper ? triu(t[0], diagonal) : tril(t[0], diagonal)};
                        }, kExact};
          }};
}

OpEntry repeat_op() {
  return {"repeat", [](Reader& in, Pool& pool) {
            Tensor x = operand(in, pool);
            Shape repeats;
            const int count = x.dim() + int(in.in_range(-1, 1));
            for (int d = 0; d < count; ++d) repeats.push_back(in.in_range(-1, 3));
            return Call{fmt::format("repeat {}", repeats), {x},
                        [=](const Inputs& t) { return Outputs{repeat(t[0], repeats)}; }, kExact};
          }};
}

OpEntry pad_op() {
  return {"pad", [](Reader& in, Pool& pool) {
            Tensor x = operand(in, pool);
            std::vector<int64_t> pads;
            const int count = int(in.in_range(0, 2 * x.dim() + 2));
            // Edge values too: a pad of INT64_MAX fails to allocate on both sides; with INT64_MIN
            // beside it the size stays small and the crop takes everything.
            for (int i = 0; i < count; ++i) pads.push_back(in.integer(-3, 3));
            Scalar value = in.scalar();
            return Call{fmt::format("pad {} value {}", fmt::join(pads, ", "), scalar_name(value)), {x},
                        [=](const Inputs& t) { return Outputs{pad(t[0], pads, value)}; }, kExact};
          }};
}

OpEntry creation() {
  return {"create", [](Reader& in, Pool& pool) {
            const uint8_t which = in.byte() % 7;
            const DType dtype = in.dtype();
            const int64_t a = in.in_range(-3, 3), b = in.in_range(-3, 8);
            static const std::array<double, 8> steps = {1, 2, -1, 0.5, 0, -0.5,
                                                        std::numeric_limits<double>::quiet_NaN(),
                                                        std::numeric_limits<double>::infinity()};
            const double step = steps[in.byte() % steps.size()];
            const bool integer_step = in.flag();
            Shape shape = read_shape(in, pool);
            Scalar value = in.scalar();
            const uint8_t seed = in.byte();
            static const std::array<const char*, 7> names = {"arange", "full", "eye", "linspace", "rand", "randn",
                                                              "randint"};
            TensorOptions options{.dtype = dtype};
            return Call{fmt::format("{} {} a {} b {} step {} shape {} value {} seed {}", names[which], dtype, a, b,
                                    step, shape, scalar_name(value), seed),
                        {}, [=](const Inputs&) {
                          Generator generator(seed);
                          switch (which) {
                            case 0:
                              return Outputs{integer_step ? arange(a, b, std::isfinite(step) ? int64_t(step) : 0, options)
                                                          : arange(a, b, step, options)};
                            case 1: return Outputs{full(shape, value, options)};
                            case 2: return Outputs{eye(a, b, options)};
                            case 3: return Outputs{linspace(double(a), double(b), b, options)};
                            case 4: return Outputs{rand(shape, options, &generator)};
                            case 5: return Outputs{randn(shape, options, &generator)};
                            default: {
                            const RandintOptions integer{.dtype = options.dtype, .device = options.device,
                                                         .requires_grad = options.requires_grad};
                            return Outputs{randint(a, b, shape, integer, &generator)};
                          }
                          }
                        }, which == 5 || which == 3 ? Accuracy::rounding : kExact};
          }};
}

}  // namespace

std::vector<OpEntry> shape_entries() {
  return {reshape_op(),   reorder(),        expand_op(),    squeeze_op(),  subviews(),
          copies(),       select_rows(),    concatenate(),  masked_fill_op(), embedding_op(),
          one_hot_op(),   triangle(),       repeat_op(),    pad_op(),      creation()};
}

}  // namespace ember::fuzz
