// CUDA matrix products through cuBLAS: f16 and bf16 on tensor cores with f32
// accumulation, f32 in f32 (TF32 under set_float32_matmul_precision("high")),
// f64 in f64. Integer products have no cuBLAS kernel and stay on the CPU, as
// in PyTorch (the exemption is in tests/cuda/test_cuda_op_coverage.cpp).
// Note [CUDA matmul layout] in kernels/cuda/README.md explains the operand mapping.
#include <cublas_v2.h>

#include <mutex>

#include "core/ops/linalg.h"
#include "core/ops/linalg_kernels.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/families.h"
#include "kernels/cuda/workspace.h"

namespace ember::cuda {
namespace {

void check_cublas(cublasStatus_t status, const char* what) {
  EMBER_CHECK(status == CUBLAS_STATUS_SUCCESS, "matmul: {} failed on cuda:{}: {} ({})", what, current_device_index(),
              cublasGetStatusString(status), int(status));
}

// One handle per thread and GPU (cuBLAS handles are not thread-safe), bound to
// the current stream at every call. Leaked at exit on purpose: destroying a
// handle after the driver has shut down is an error.
cublasHandle_t handle() {
  thread_local cublasHandle_t handles[kMaxDevicesPerType] = {};
  cublasHandle_t& h = handles[current_device_index()];
  if (h == nullptr) check_cublas(cublasCreate(&h), "cublasCreate");
  check_cublas(cublasSetStream(h, current_stream()), "cublasSetStream");
  return h;
}

template <class T>
struct BlasTypes;
template <>
struct BlasTypes<float> {
  static constexpr cudaDataType_t data = CUDA_R_32F;
  using Scale = float;
};
template <>
struct BlasTypes<double> {
  static constexpr cudaDataType_t data = CUDA_R_64F;
  using Scale = double;
};
template <>
struct BlasTypes<Half> {
  static constexpr cudaDataType_t data = CUDA_R_16F;
  using Scale = float;
};
template <>
struct BlasTypes<BFloat16> {
  static constexpr cudaDataType_t data = CUDA_R_16BF;
  using Scale = float;
};

template <class T>
cublasComputeType_t compute_type() {
  if constexpr (std::is_same_v<T, double>) return CUBLAS_COMPUTE_64F;
  else if constexpr (std::is_same_v<T, float>)
    return float32_matmul_precision() == "high" ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  else return CUBLAS_COMPUTE_32F;
}

// A [rows, cols] operand as cuBLAS sees it: column-major with a leading
// dimension, transposed or not.
struct BlasOperand {
  const void* data;
  cublasOperation_t op;
  int64_t ld;
};

// Whether the operand is a plain (possibly transposed) matrix that cuBLAS reads in place.
bool blas_readable(const MatrixOperand& m, int64_t rows, int64_t cols) {
  return (m.col_stride == 1 && m.row_stride >= cols) || (m.row_stride == 1 && m.col_stride >= rows);
}

// Row-major [rows, cols] with rows contiguous is column-major [cols, rows]:
// cuBLAS takes it untransposed with ld = row_stride; a column-contiguous one is
// the transpose.
BlasOperand blas_operand(const MatrixOperand& m, const void* data) {
  if (m.col_stride == 1) return {data, CUBLAS_OP_N, m.row_stride};
  return {data, CUBLAS_OP_T, m.col_stride};
}

// MatmulProblem::batch_offset on the device (core's is host code).
__device__ int64_t batch_offset(const MatmulProblem& p, const MatrixOperand& operand, int64_t index) {
  int64_t offset = 0;
  for (int d = p.batch_ndim - 1; d >= 0; --d) {
    offset += (index % p.batch_shape[d]) * operand.batch_strides[d];
    index /= p.batch_shape[d];
  }
  return offset;
}

// Copies a strided operand into a dense [batch..., rows, cols] buffer.
template <class T>
__global__ void pack_kernel(MatmulProblem p, MatrixOperand source, int64_t rows, int64_t cols, T* out, int64_t total) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t col = i % cols, row = (i / cols) % rows, batch = i / (cols * rows);
    const T* in = static_cast<const T*>(source.data) + batch_offset(p, source, batch);
    out[i] = in[row * source.row_stride + col * source.col_stride];
  }
}

// out[b, i, j] = bias[i, j] for every batch b: the addend that beta = 1 then keeps.
template <class T>
__global__ void broadcast_bias_kernel(MatrixOperand bias, int64_t m, int64_t n, T* out, int64_t total) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t col = i % n, row = (i / n) % m;
    out[i] = static_cast<const T*>(bias.data)[row * bias.row_stride + col * bias.col_stride];
  }
}

// The batch dims of the problem as one strided batch when every operand's
// batch strides are uniform over the flattened index; otherwise 0.
int64_t uniform_batch_stride(const MatmulProblem& p, const MatrixOperand& m, bool* uniform) {
  if (p.batch_ndim == 0) return 0;
  int64_t expected = m.batch_strides[p.batch_ndim - 1];
  for (int d = p.batch_ndim - 1; d > 0; --d) {
    if (m.batch_strides[d - 1] != expected * p.batch_shape[d]) *uniform = false;
    expected *= p.batch_shape[d];
  }
  return m.batch_strides[p.batch_ndim - 1];
}

template <class T>
void matmul(const MatmulProblem& p) {
  using Types = BlasTypes<T>;
  const int64_t batches = p.batch_count(), m = p.m, n = p.n, k = p.k;
  MatmulProblem problem = p;  // operands may be replaced by packed copies below
  std::unique_ptr<Workspace> packed_a, packed_b;
  auto pack = [&](MatrixOperand& operand, int64_t rows, int64_t cols, std::unique_ptr<Workspace>& buffer) {
    if (blas_readable(operand, rows, cols)) return;
    const int64_t total = batches * rows * cols;
    buffer = std::make_unique<Workspace>(size_t(total) * sizeof(T));
    pack_kernel<T><<<blocks_for(total, 256), 256, 0, current_stream()>>>(problem, operand, rows, cols,
                                                                           buffer->as<T>(), total);
    check_launch("matmul (packing a strided operand)");
    operand.data = buffer->as<void>();
    operand.row_stride = cols, operand.col_stride = 1;
    int64_t stride = rows * cols;
    for (int d = problem.batch_ndim - 1; d >= 0; --d) {
      operand.batch_strides[d] = stride;
      stride *= problem.batch_shape[d];
    }
  };
  pack(problem.a, m, k, packed_a);
  pack(problem.b, k, n, packed_b);

  typename Types::Scale alpha = 1, beta = 0;
  if (problem.bias.data != nullptr) {
    const int64_t total = batches * m * n;
    broadcast_bias_kernel<T><<<blocks_for(total, 256), 256, 0, current_stream()>>>(
        problem.bias, m, n, static_cast<T*>(problem.out.data), total);
    check_launch("matmul (bias)");
    beta = 1;
  }

  // Row-major out = a @ b is column-major out^T = b^T a^T: cuBLAS's "A" is our b.
  const BlasOperand blas_b = blas_operand(problem.b, problem.b.data);
  const BlasOperand blas_a = blas_operand(problem.a, problem.a.data);
  bool uniform = true;
  const int64_t stride_a = uniform_batch_stride(problem, problem.a, &uniform);
  const int64_t stride_b = uniform_batch_stride(problem, problem.b, &uniform);
  const int64_t stride_out = m * n;
  const int64_t inner = problem.batch_ndim == 0 ? 1 : (uniform ? batches : problem.batch_shape[problem.batch_ndim - 1]);
  const int64_t outer = batches / inner;
  EMBER_CHECK(m <= INT32_MAX && n <= INT32_MAX && k <= INT32_MAX && inner <= INT32_MAX,
              "matmul: [{}, {}] x [{}, {}] exceeds cuBLAS's 32-bit dims", m, k, k, n);
  for (int64_t o = 0; o < outer; ++o) {
    const int64_t first = o * inner;  // the flat batch index of this call's first matrix
    const char* a_data = static_cast<const char*>(blas_a.data) + problem.batch_offset(problem.a, first) * sizeof(T);
    const char* b_data = static_cast<const char*>(blas_b.data) + problem.batch_offset(problem.b, first) * sizeof(T);
    char* out_data = static_cast<char*>(problem.out.data) + first * stride_out * int64_t(sizeof(T));
    check_cublas(cublasGemmStridedBatchedEx(handle(), blas_b.op, blas_a.op, int(n), int(m), int(k), &alpha, b_data,
                                            Types::data, blas_b.ld, stride_b, a_data, Types::data, blas_a.ld, stride_a,
                                            &beta, out_data, Types::data, n, stride_out, int(inner), compute_type<T>(),
                                            CUBLAS_GEMM_DEFAULT),
                 "cublasGemmStridedBatchedEx");
  }
}

}  // namespace

void register_matmul_kernels() {
  register_for<float, double, Half, BFloat16>(matmul_op, DeviceType::cuda,
                                              [](auto tag) { return &matmul<decltype(tag)>; });
}

}  // namespace ember::cuda
