// CPU convolution and its gradients, on oneDNN primitives cached
// like matmul's (Note [oneDNN primitive cache] in kernels/cpu/onednn.h).
// f32 and bf16 convolutions (forward_inference, since the raw ops keep no
// workspace; convolution_backward_data / _weights for the gradients) run on
// the blocked layouts oneDNN picks for its direct JIT kernels, with reorders
// from and to the caller's NCHW memory: at the CNN's sizes the direct kernels
// take a third to a half of the im2col + GEMM path that plain layouts get,
// reorders included (a forward with a few input channels reads NCHW src
// directly; conv2d_backward, both gradients at once, reorders grad_output
// once for the two passes). f16, and bf16 where oneDNN has only its
// reference loops (no avx512_bf16, or the switch of onednn_bf16_enabled()
// off), compute in f32; f64 uses direct loops (the gradients: the reference
// kernels). Pooling is in pool.cpp and max_pool_backward.cpp. Oracle:
// kernels/reference/conv.cpp; tests: tests/core/test_conv.cpp.
#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include "core/ops/conv_kernels.h"
#include "core/parallel.h"
#include "kernels/cpu/conv_common.h"
#include "kernels/cpu/families.h"

namespace ember::cpu {
namespace {

using dnnl::memory;

// ---- convolution ------------------------------------------------------------

PrimitiveKey key_of(const Conv2dProblem& p, DType dtype, int threads) {
  PrimitiveKey key;
  key.add(int64_t(dtype));
  key.add(threads);
  add_conv2d_geometry(key, p);
  return key;
}

// f32 and bf16 run on the layouts oneDNN prefers (see make_conv_layout
// below). False, with nothing written, when oneDNN has only its reference
// loops for bf16 (the caller converts to f32); f32 always runs.
enum class ConvPass { forward, input_gradient, weight_gradient };
bool conv_forward_on_layouts(const Conv2dProblem& p, DType dtype);

void conv2d_f32(const Conv2dProblem& p) { conv_forward_on_layouts(p, DType::f32); }

template <class T>
void conv2d_in_f32(const Conv2dProblem& p) {
  Conv2dProblem wide = p;
  int64_t group_in = p.in_channels / p.groups;
  Tensor input = converted<float, T>(p.input, p.batch * p.in_channels * p.in_size[0] * p.in_size[1]);
  Tensor weight = converted<float, T>(p.weight, p.out_channels * group_in * p.kernel[0] * p.kernel[1]);
  Tensor bias = p.bias ? converted<float, T>(p.bias, p.out_channels) : Tensor();
  Tensor out = make_tensor({p.batch * p.out_channels * p.out_size[0] * p.out_size[1]}, DType::f32);
  wide.input = input.data_ptr(), wide.weight = weight.data_ptr(), wide.out = out.data_ptr();
  wide.bias = p.bias ? bias.data_ptr() : nullptr;
  conv2d_f32(wide);
  convert_into<T>(out, p.out);
}

void conv2d_bf16(const Conv2dProblem& p) {
  if (onednn_bf16_enabled() && conv_forward_on_layouts(p, DType::bf16)) return;
  conv2d_in_f32<BFloat16>(p);
}

void conv2d_f16(const Conv2dProblem& p) { conv2d_in_f32<Half>(p); }

// f64: for each output plane, add every (channel, tap) as a shifted,
// scaled copy of an input plane; the innermost loop runs along a row.
void conv2d_f64(const Conv2dProblem& p) {
  const double* input = static_cast<const double*>(p.input);
  const double* weight = static_cast<const double*>(p.weight);
  const double* bias = static_cast<const double*>(p.bias);
  double* out = static_cast<double*>(p.out);
  const int64_t group_in = p.in_channels / p.groups, group_out = p.out_channels / p.groups;
  // Plain copies, not structured bindings: clang 14 cannot capture those in lambdas.
  const int64_t in_h = p.in_size[0], in_w = p.in_size[1], out_h = p.out_size[0], out_w = p.out_size[1];
  const int64_t plane_work = out_h * out_w * group_in * p.kernel[0] * p.kernel[1];
  parallel_for(0, p.batch * p.out_channels, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, plane_work)),
               [&](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) {
      int64_t n = plane / p.out_channels, o = plane % p.out_channels;
      double* result = out + plane * out_h * out_w;
      std::fill(result, result + out_h * out_w, bias ? bias[o] : 0.0);
      for (int64_t c = 0; c < group_in; ++c) {
        const double* source = input + (n * p.in_channels + (o / group_out) * group_in + c) * in_h * in_w;
        for (int64_t ky = 0; ky < p.kernel[0]; ++ky)
          for (int64_t kx = 0; kx < p.kernel[1]; ++kx) {
            double tap = weight[((o * group_in + c) * p.kernel[0] + ky) * p.kernel[1] + kx];
            int64_t dx = kx * p.dilation[1] - p.padding[1];
            // Output columns x whose input column x * stride + dx lies inside the row.
            int64_t x_begin = dx >= 0 ? 0 : (-dx + p.stride[1] - 1) / p.stride[1];
            int64_t x_end = std::min(out_w, in_w - dx <= 0 ? 0 : (in_w - dx - 1) / p.stride[1] + 1);
            for (int64_t y = 0; y < out_h; ++y) {
              int64_t iy = y * p.stride[0] - p.padding[0] + ky * p.dilation[0];
              if (iy < 0 || iy >= in_h) continue;
              const double* row = source + iy * in_w + dx;
              for (int64_t x = x_begin; x < x_end; ++x) result[y * out_w + x] += tap * row[x * p.stride[1]];
            }
          }
      }
    }
  });
}

// ---- f32 and bf16 convolution and its gradients on oneDNN's layouts ----------
// The gradients are oneDNN's own backward primitives (backward data, backward
// weights), built with a forward_training descriptor as their hint; in bf16
// every operand is bf16, the weight gradient included (autocast's cast
// backward widens it for an f32 parameter), and oneDNN accumulates in f32.
// f16, and bf16 without oneDNN's bf16 kernels, convert to f32 (f64 gradients
// keep the reference kernel's direct loops, gradcheck-sized).

// A convolution primitive on the layouts oneDNN prefers (blocked, for its
// direct JIT kernels rather than im2col + GEMM), with reorders from the
// caller's plain inputs and back into its plain output where they differ.
// One caller at a time (`busy`): the blocked buffers belong to the entry. The
// scratchpad is the caller's thread's (Note [oneDNN scratchpads]).
struct ConvLayoutEntry {
  static constexpr int kMaxOperands = 4;
  struct Operand {
    int arg = 0;
    bool output = false;
    memory plain, blocked;  // blocked is plain (no reorder) when the layouts agree
    dnnl::reorder reorder;
    size_t reorder_scratchpad_bytes = 0;
  };
  dnnl::primitive primitive;
  size_t scratchpad_bytes = 0;
  std::vector<Operand> operands;
  std::mutex busy;
};

PrimitiveCache<ConvLayoutEntry>& conv_layout_cache() {
  static PrimitiveCache<ConvLayoutEntry> cache(64);
  return cache;
}

std::shared_ptr<ConvLayoutEntry> make_conv_layout(const Conv2dProblem& p, ConvPass which, DType dtype) {
  const memory::data_type type = onednn_type(dtype);
  memory::desc weights = p.groups == 1
      ? memory::desc({p.out_channels, p.in_channels, p.kernel[0], p.kernel[1]}, type, memory::format_tag::oihw)
      : memory::desc({p.groups, p.out_channels / p.groups, p.in_channels / p.groups, p.kernel[0], p.kernel[1]}, type,
                     memory::format_tag::goihw);
  memory::desc src = nchw(p.batch, p.in_channels, p.in_size, type), dst = nchw(p.batch, p.out_channels, p.out_size, type);
  memory::desc any_weights(weights.dims(), type, memory::format_tag::any);
  memory::desc any_src(src.dims(), type, memory::format_tag::any), any_dst(dst.dims(), type, memory::format_tag::any);
  // oneDNN counts dilation from 0 and wants the right padding that makes the
  // floor-mode output size exact.
  memory::dims strides{p.stride[0], p.stride[1]}, dilation{p.dilation[0] - 1, p.dilation[1] - 1};
  memory::dims left{p.padding[0], p.padding[1]}, right(2);
  for (int d = 0; d < 2; ++d)
    right[size_t(d)] = (p.out_size[d] - 1) * p.stride[d] + (p.kernel[d] - 1) * p.dilation[d] + 1 - p.in_size[d] - p.padding[d];
  const dnnl::engine& engine = onednn_engine();
  auto hint = [&] {
    return dnnl::convolution_forward::primitive_desc(
        dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                        any_src, any_weights, any_dst, strides, dilation, left, right),
        engine);
  };
  auto entry = std::make_shared<ConvLayoutEntry>();
  auto add = [&](int arg, const memory::desc& plain, const memory::desc& chosen, bool output) {
    ConvLayoutEntry::Operand operand{arg, output, memory(plain, engine, nullptr), {}, {}};
    if (chosen == plain) {
      operand.blocked = operand.plain;
    } else {
      operand.blocked = memory(chosen, engine);
      const memory &from = output ? operand.blocked : operand.plain, &to = output ? operand.plain : operand.blocked;
      operand.reorder = dnnl::reorder(dnnl::reorder::primitive_desc(from, to, onednn_attributes()));
      operand.reorder_scratchpad_bytes = scratchpad_bytes(operand.reorder);
    }
    entry->operands.push_back(std::move(operand));
  };
  // For bf16, whether oneDNN has a real kernel for the pass, asked before any
  // operand memory is made.
  auto usable = [&](const dnnl::primitive_desc_base& pd) {
    return dtype == DType::f32 || !is_reference_implementation(pd);
  };
  if (which == ConvPass::forward) {
    memory::desc bias = p.bias ? memory::desc({p.out_channels}, type, memory::format_tag::x) : memory::desc();
    auto forward = [&](const memory::desc& src_layout) {
      return dnnl::convolution_forward::primitive_desc(
          dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                          src_layout, any_weights, bias, any_dst, strides, dilation, left, right),
          onednn_attributes(), engine);
    };
    // A few input channels (a first layer: grey or RGB images): left free,
    // oneDNN picks channels-last for src and dst, and the dst reorder back to
    // NCHW costs more than the convolution (64x32x28x28: 1.8 ms against
    // 1.2 ms). Its direct JIT kernel reads NCHW src itself and writes the
    // blocked dst, whose reorder is the cheap one; kept when oneDNN takes
    // that kernel rather than falling back to GEMM or the reference loops.
    dnnl::convolution_forward::primitive_desc pd;
    if (p.in_channels / p.groups < 4) {
      pd = forward(src);
      const std::string implementation = pd.impl_info_str();
      if (implementation.find("gemm") != std::string::npos || implementation.find("ref") != std::string::npos)
        pd = forward(any_src);
    } else {
      pd = forward(any_src);
    }
    if (!usable(pd)) return nullptr;
    entry->primitive = dnnl::convolution_forward(pd);
    entry->scratchpad_bytes = scratchpad_bytes(entry->primitive);
    add(DNNL_ARG_SRC, src, pd.src_desc(), false);
    add(DNNL_ARG_WEIGHTS, weights, pd.weights_desc(), false);
    if (p.bias) add(DNNL_ARG_BIAS, bias, pd.bias_desc(), false);
    add(DNNL_ARG_DST, dst, pd.dst_desc(), true);
  } else if (which == ConvPass::input_gradient) {
    dnnl::convolution_backward_data::primitive_desc pd(
        dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, any_src, any_weights, any_dst,
                                              strides, dilation, left, right),
        onednn_attributes(), engine, hint());
    if (!usable(pd)) return nullptr;
    entry->primitive = dnnl::convolution_backward_data(pd);
    entry->scratchpad_bytes = scratchpad_bytes(entry->primitive);
    add(DNNL_ARG_DIFF_DST, dst, pd.diff_dst_desc(), false);
    add(DNNL_ARG_WEIGHTS, weights, pd.weights_desc(), false);
    add(DNNL_ARG_DIFF_SRC, src, pd.diff_src_desc(), true);
  } else {
    dnnl::convolution_backward_weights::primitive_desc pd(
        dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, any_src, any_weights, any_dst,
                                                 strides, dilation, left, right),
        onednn_attributes(), engine, hint());
    if (!usable(pd)) return nullptr;
    entry->primitive = dnnl::convolution_backward_weights(pd);
    entry->scratchpad_bytes = scratchpad_bytes(entry->primitive);
    add(DNNL_ARG_SRC, src, pd.src_desc(), false);
    add(DNNL_ARG_DIFF_DST, dst, pd.diff_dst_desc(), false);
    add(DNNL_ARG_DIFF_WEIGHTS, weights, pd.diff_weights_desc(), true);
  }
  EMBER_ASSERT(entry->operands.size() <= size_t(ConvLayoutEntry::kMaxOperands), "conv2d: {} oneDNN operands",
               entry->operands.size());
  return entry;
}

// A null entry for bf16 when oneDNN has nothing better than its reference
// loops for the pass (a CPU without avx512_bf16, or an unusual geometry).
// Any other refusal is an error naming the geometry: oneDNN bounds some
// values (strides, paddings near 2^40 over a tiny input) more tightly than
// the output-size arithmetic the op checked.
std::shared_ptr<ConvLayoutEntry> make_conv_layout_or_none(const Conv2dProblem& p, ConvPass which, DType dtype) {
  try {
    return make_conv_layout(p, which, dtype);
  } catch (const dnnl::error& error) {
    if (error.status == dnnl_unimplemented && dtype != DType::f32) return nullptr;
    const char* pass = which == ConvPass::forward ? "conv2d" : which == ConvPass::input_gradient
                                                                   ? "conv2d_backward_input"
                                                                   : "conv2d_backward_weight";
    EMBER_CHECK(false,
                "{}: oneDNN cannot run this {} convolution (input [{}, {}, {}, {}], weight [{}, {}, {}, {}], stride "
                "[{}, {}], padding [{}, {}], dilation [{}, {}], groups {}): {}",
                pass, dtype, p.batch, p.in_channels, p.in_size[0], p.in_size[1], p.out_channels,
                p.in_channels / p.groups, p.kernel[0], p.kernel[1], p.stride[0], p.stride[1], p.padding[0],
                p.padding[1], p.dilation[0], p.dilation[1], p.groups, error.what());
    return nullptr;
  }
}

// Runs the reorder between an operand's plain and blocked memory.
void run_reorder(const ConvLayoutEntry::Operand& operand) {
  dnnl_exec_arg_t args[3] = {{DNNL_ARG_FROM, (operand.output ? operand.blocked : operand.plain).get()},
                             {DNNL_ARG_TO, (operand.output ? operand.plain : operand.blocked).get()}};
  onednn_execute(operand.reorder, operand.reorder_scratchpad_bytes, args, 2);
}

// An input operand already in the layout an entry wants, in another entry's
// memory (the backward passes' shared grad_output): `arg` reads `blocked`
// instead of reordering its own copy.
struct SharedOperand {
  int arg = 0;
  const memory* blocked = nullptr;
};

// Runs `entry`, whose lock the caller holds, with handles[i] the plain data
// of operand i.
void execute_locked(ConvLayoutEntry& entry, std::initializer_list<const void*> handles, SharedOperand shared = {}) {
  dnnl_exec_arg_t args[ConvLayoutEntry::kMaxOperands + 1];
  int count = 0;
  const void* const* handle = handles.begin();
  for (ConvLayoutEntry::Operand& operand : entry.operands) {
    operand.plain.set_data_handle(const_cast<void*>(*handle++));
    if (shared.blocked && operand.arg == shared.arg) {
      args[count++] = {operand.arg, shared.blocked->get()};
      continue;
    }
    if (!operand.output && operand.reorder) run_reorder(operand);
    args[count++] = {operand.arg, operand.blocked.get()};
  }
  onednn_execute(entry.primitive, entry.scratchpad_bytes, args, count);
  for (ConvLayoutEntry::Operand& operand : entry.operands)
    if (operand.output && operand.reorder) run_reorder(operand);
}

const ConvLayoutEntry::Operand& operand_of(const ConvLayoutEntry& entry, int arg) {
  auto found = std::find_if(entry.operands.begin(), entry.operands.end(),
                            [arg](const ConvLayoutEntry::Operand& operand) { return operand.arg == arg; });
  EMBER_ASSERT(found != entry.operands.end(), "conv2d: no oneDNN operand {}", arg);
  return *found;
}

// Note [Small primitives run on one thread] (kernels/cpu/onednn.h): every
// pass of a convolution has the forward's multiply-adds.
int conv_threads(const Conv2dProblem& p) {
  return onednn_threads(p.batch * p.out_channels * p.out_size[0] * p.out_size[1] * (p.in_channels / p.groups) *
                        p.kernel[0] * p.kernel[1]);
}

// The cached entry of a pass; null for bf16 without a real kernel.
std::shared_ptr<ConvLayoutEntry> conv_layout(const Conv2dProblem& p, ConvPass which, DType dtype, int threads) {
  PrimitiveKey key = key_of(p, dtype, threads);
  key.add(int64_t(which));
  return conv_layout_cache().get(key, [&] { return make_conv_layout_or_none(p, which, dtype); });
}

// Handles are the plain data of the pass's operands, in the order
// make_conv_layout adds them.
bool run_conv_on_layouts(const Conv2dProblem& p, ConvPass which, DType dtype,
                         std::initializer_list<const void*> handles) {
  const int threads = conv_threads(p);
  OnednnThreadsGuard threads_guard(threads);
  std::shared_ptr<ConvLayoutEntry> entry = conv_layout(p, which, dtype, threads);
  if (!entry) return false;
  std::lock_guard lock(entry->busy);
  execute_locked(*entry, handles);
  return true;
}

bool conv_forward_on_layouts(const Conv2dProblem& p, DType dtype) {
  if (p.bias) return run_conv_on_layouts(p, ConvPass::forward, dtype, {p.input, p.weight, p.bias, p.out});
  return run_conv_on_layouts(p, ConvPass::forward, dtype, {p.input, p.weight, p.out});
}

bool conv_backward_on_layouts(const Conv2dBackwardProblem& b, ConvPass which, DType dtype) {
  const Conv2dProblem& p = b.forward;
  if (which == ConvPass::input_gradient) return run_conv_on_layouts(p, which, dtype, {b.grad_output, p.weight, b.grad});
  return run_conv_on_layouts(p, which, dtype, {p.input, b.grad_output, b.grad});
}

template <ConvPass which>
void conv_backward_f32_kernel(const Conv2dBackwardProblem& b) {
  conv_backward_on_layouts(b, which, DType::f32);
}

// 16-bit floats: the operands widened to f32, the gradient rounded once.
template <ConvPass which, class T>
void conv_backward_in_f32(const Conv2dBackwardProblem& b) {
  const Conv2dProblem& p = b.forward;
  const int64_t group_in = p.in_channels / p.groups;
  const int64_t input_count = p.batch * p.in_channels * p.in_size[0] * p.in_size[1];
  const int64_t weight_count = p.out_channels * group_in * p.kernel[0] * p.kernel[1];
  Conv2dBackwardProblem wide = b;
  Tensor grad_output =
      converted<float, T>(b.grad_output, p.batch * p.out_channels * p.out_size[0] * p.out_size[1]);
  Tensor known = which == ConvPass::input_gradient ? converted<float, T>(p.weight, weight_count)
                                              : converted<float, T>(p.input, input_count);
  Tensor grad = make_tensor({which == ConvPass::input_gradient ? input_count : weight_count}, DType::f32);
  (which == ConvPass::input_gradient ? wide.forward.weight : wide.forward.input) = known.data_ptr();
  wide.grad_output = grad_output.data_ptr(), wide.grad = grad.data_ptr();
  conv_backward_on_layouts(wide, which, DType::f32);
  convert_into<T>(grad, b.grad);
}

template <ConvPass which>
void conv_backward_bf16(const Conv2dBackwardProblem& b) {
  if (onednn_bf16_enabled() && conv_backward_on_layouts(b, which, DType::bf16)) return;
  conv_backward_in_f32<which, BFloat16>(b);
}

// Both gradients on oneDNN's layouts, each pass's own primitive as in the
// single passes (so each gradient is theirs, bit for bit), with grad_output
// reordered once: backward data reorders it into its blocked memory, and
// backward weights reads that memory where it wants the same layout
// (reordering its own copy where not). Both entries stay locked until the
// second pass has read the first one's memory. False, with nothing written,
// when either pass lacks a real bf16 kernel.
bool conv_backward_both_on_layouts(const Conv2dBackwardBothProblem& b, DType dtype) {
  const Conv2dProblem& p = b.forward;
  const int threads = conv_threads(p);
  OnednnThreadsGuard threads_guard(threads);
  std::shared_ptr<ConvLayoutEntry> data = conv_layout(p, ConvPass::input_gradient, dtype, threads);
  std::shared_ptr<ConvLayoutEntry> weights = conv_layout(p, ConvPass::weight_gradient, dtype, threads);
  if (!data || !weights) return false;
  std::scoped_lock lock(data->busy, weights->busy);
  execute_locked(*data, {b.grad_output, p.weight, b.grad_input});
  const memory& grad_output = operand_of(*data, DNNL_ARG_DIFF_DST).blocked;
  const bool same_layout = grad_output.get_desc() == operand_of(*weights, DNNL_ARG_DIFF_DST).blocked.get_desc();
  execute_locked(*weights, {p.input, b.grad_output, b.grad_weight},
                 same_layout ? SharedOperand{DNNL_ARG_DIFF_DST, &grad_output} : SharedOperand{});
  return true;
}

void conv_backward_both_f32(const Conv2dBackwardBothProblem& b) { conv_backward_both_on_layouts(b, DType::f32); }

// bf16 without oneDNN's bf16 kernels for both passes, and f16: the single
// passes, each with its own fallback.
void conv_backward_both_bf16(const Conv2dBackwardBothProblem& b) {
  if (onednn_bf16_enabled() && conv_backward_both_on_layouts(b, DType::bf16)) return;
  conv_backward_bf16<ConvPass::input_gradient>(b.input_pass());
  conv_backward_bf16<ConvPass::weight_gradient>(b.weight_pass());
}

void conv_backward_both_f16(const Conv2dBackwardBothProblem& b) {
  conv_backward_in_f32<ConvPass::input_gradient, Half>(b.input_pass());
  conv_backward_in_f32<ConvPass::weight_gradient, Half>(b.weight_pass());
}

template <ConvPass which>
void register_conv_backward(Op<void(const Conv2dBackwardProblem&)>& op) {
  op.set(DeviceType::cpu, DType::f32, &conv_backward_f32_kernel<which>);
  op.set(DeviceType::cpu, DType::bf16, &conv_backward_bf16<which>);
  op.set(DeviceType::cpu, DType::f16, &conv_backward_in_f32<which, Half>);
}

}  // namespace

void register_conv_kernels() {
  conv2d_op.set(DeviceType::cpu, DType::f32, &conv2d_f32);
  conv2d_op.set(DeviceType::cpu, DType::bf16, &conv2d_bf16);
  conv2d_op.set(DeviceType::cpu, DType::f16, &conv2d_f16);
  conv2d_op.set(DeviceType::cpu, DType::f64, &conv2d_f64);
  register_conv_backward<ConvPass::input_gradient>(conv2d_backward_input_op);
  register_conv_backward<ConvPass::weight_gradient>(conv2d_backward_weight_op);
  conv2d_backward_op.set(DeviceType::cpu, DType::f32, &conv_backward_both_f32);
  conv2d_backward_op.set(DeviceType::cpu, DType::bf16, &conv_backward_both_bf16);
  conv2d_backward_op.set(DeviceType::cpu, DType::f16, &conv_backward_both_f16);
}

}  // namespace ember::cpu
