// CUDA copy and fill: a same-dtype dense copy is one cudaMemcpyAsync; the rest
// run through the element-wise launcher, converting as core/convert.h does.
#include "core/ops/elementwise_kernels.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/families.h"

namespace ember::cuda {
namespace {

template <class Out, class In>
struct Convert {
  __device__ ComputeType<Out> operator()(ComputeType<In> v) const { return convert_value<Out>(v); }
};

template <class Out>
struct Constant {
  ComputeType<Out> value;
  __device__ ComputeType<Out> operator()() const { return value; }
};

template <class Out>
void copy(const ElementwiseLoop& loop) {
  if (loop.dtypes[1] == loop.dtypes[0] && loop.contiguous()) {
    EMBER_CUDA_CHECK(cudaMemcpyAsync(loop.data[0], loop.data[1], size_t(loop.numel) * sizeof(Out),
                                     cudaMemcpyDeviceToDevice, current_stream()));
    return;
  }
  visit_dtype(loop.dtypes[1], [&]<class In>() { launch_elementwise<Out, In>(loop, Convert<Out, In>{}, "copy"); });
}

template <class Out>
void fill(const ElementwiseLoop& loop, const Scalar& value) {
  launch_elementwise<Out>(loop, Constant<Out>{ComputeType<Out>(value.to<Out>())}, "fill");
}

}  // namespace

void register_copy_kernels() {
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      copy_op, DeviceType::cuda, [](auto tag) { return &copy<decltype(tag)>; });
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      fill_op, DeviceType::cuda, [](auto tag) { return &fill<decltype(tag)>; });
}

}  // namespace ember::cuda
