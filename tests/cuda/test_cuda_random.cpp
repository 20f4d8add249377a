// The CUDA random and dropout kernels (kernels/cuda/random.cu, dropout.cu):
// from the same generator state a GPU must give the CPU's uniform, randint and
// dropout values bit for bit, and its normals within the per-dtype tolerance
// (CUDA's log, sin and cos differ from glibc's in the last bits: Note [Random
// streams on the GPU], kernels/cuda/README.md). Sizes cover partial Philox
// blocks and many GPU blocks; offsets cross the counter's 32-bit boundary.
// Skips without a GPU, except the coverage test.
#include <set>

#include "cuda/cuda_compare.h"
#include "cuda/kernel_coverage.h"

namespace ember::testing {
namespace {

const DType kFloatDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16};
const int64_t kSizes[] = {1, 3, 4, 5, 7, 1000, 100003};
// Generator states: a fresh stream, and one whose counters cross 2^32.
const GeneratorState kStates[] = {{.seed = 2024, .offset = 0}, {.seed = 7, .offset = (uint64_t(1) << 32) - 3}};

// `make` run on the CPU (the reference kernels, which the CPU ones equal bit
// for bit) and on the GPU from the same generator state; the GPU's result
// comes back to the CPU.
template <class Make>
std::pair<Tensor, Tensor> on_both(GeneratorState state, Make make) {
  Generator cpu_generator, gpu_generator;
  cpu_generator.set_state(state);
  gpu_generator.set_state(state);
  Tensor expected = reference([&] { return make(kCPU, &cpu_generator); });
  Tensor actual = make(kGpu, &gpu_generator);
  EXPECT_TRUE(actual.device().is_cuda());
  EXPECT_EQ(gpu_generator.state().offset, cpu_generator.state().offset);
  return {actual.to(kCPU), expected};
}

TEST(CudaRandom, EveryCpuDtypeHasACudaKernel) {
  const std::set<std::string> ours = {"uniform", "normal", "randint", "dropout"};
  EXPECT_TRUE(cuda_registers_cpu_dtypes(ours));
}

TEST(CudaRandom, UniformIsBitIdenticalToTheCpu) {
  EMBER_REQUIRE_GPU();
  for (const GeneratorState& state : kStates) {
    for (DType dtype : kFloatDTypes) {
      for (int64_t n : kSizes) {
        auto [actual, expected] = on_both(state, [&](Device device, Generator* generator) {
          Tensor first = rand({n}, {.dtype = dtype, .device = device}, generator);
          return cat({first, rand({n}, {.dtype = dtype, .device = device}, generator)});  // a second, later stream
        });
        EXPECT_TRUE(all_close(actual, expected, 0, 0)) << dtype_name(dtype) << " n=" << n << " offset " << state.offset;
      }
    }
  }
}

TEST(CudaRandom, RandintIsBitIdenticalToTheCpu) {
  EMBER_REQUIRE_GPU();
  struct Range {
    int64_t low, high;
  };
  const int64_t big = int64_t(1) << 62;
  for (const GeneratorState& state : kStates) {
    for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::boolean}) {
      std::vector<Range> ranges = {{0, 2}};
      if (dtype != DType::boolean) {
        ranges.push_back({-5, 5});
        ranges.push_back({0, 1000});
        ranges.push_back({-(int64_t(1) << 31), int64_t(1) << 31});  // exactly 2^32 values: still one word a value
      }
      if (dtype != DType::boolean && dtype != DType::i32) ranges.push_back({-big, big});  // two words a value
      // randint refuses a floating dtype a range whose integers it cannot all hold.
      const int digits = dtype == DType::f16 ? 11 : dtype == DType::bf16 ? 8 : dtype == DType::f32 ? 24 : 53;
      std::erase_if(ranges, [&](const Range& range) {
        return is_floating(dtype) && (range.low < -(int64_t(1) << digits) || range.high - 1 > (int64_t(1) << digits));
      });
      for (const Range& range : ranges) {
        for (int64_t n : kSizes) {
          auto [actual, expected] = on_both(state, [&](Device device, Generator* generator) {
            return randint(range.low, range.high, {n}, {.dtype = dtype, .device = device}, generator);
          });
          EXPECT_TRUE(all_close(actual, expected, 0, 0))
              << dtype_name(dtype) << " [" << range.low << ", " << range.high << ") n=" << n;
        }
      }
    }
  }
}

TEST(CudaRandom, NormalIsCloseToTheCpu) {
  EMBER_REQUIRE_GPU();
  for (const GeneratorState& state : kStates) {
    for (DType dtype : kFloatDTypes) {
      for (int64_t n : kSizes) {
        auto [actual, expected] = on_both(state, [&](Device device, Generator* generator) {
          return randn({n}, {.dtype = dtype, .device = device}, generator);
        });
        EXPECT_TRUE(all_close(actual, expected)) << dtype_name(dtype) << " n=" << n;
      }
    }
  }
}

TEST(CudaRandom, DropoutMaskAndValuesAreBitIdenticalToTheCpu) {
  EMBER_REQUIRE_GPU();
  for (const GeneratorState& state : kStates) {
    for (DType dtype : kFloatDTypes) {
      for (double p : {0.1, 0.5, 0.9, 1.0}) {
        for (int64_t n : kSizes) {
          // Ones show the mask alone; random values also the scaling in the compute type.
          for (const Tensor& input : {ones({n}, {.dtype = dtype}), random_tensor({n}, dtype)}) {
            auto [actual, expected] = on_both(state, [&](Device device, Generator* generator) {
              return dropout(input.to(device), p, true, generator);
            });
            EXPECT_TRUE(all_close(actual, expected, 0, 0)) << dtype_name(dtype) << " p=" << p << " n=" << n;
          }
        }
      }
    }
  }
  // A strided input is made dense first; the mask still follows the element order.
  Tensor wide = random_tensor({40, 64}, DType::f32);
  auto [actual, expected] = on_both(kStates[0], [&](Device device, Generator* generator) {
    return dropout(wide.to(device).transpose(0, 1), 0.3, true, generator);
  });
  EXPECT_TRUE(all_close(actual, expected, 0, 0));
}

TEST(CudaRandom, DropoutBackwardReusesTheForwardMask) {
  EMBER_REQUIRE_GPU();
  for (DType dtype : kFloatDTypes) {
    Tensor input = random_tensor({1001}, dtype), grad = random_tensor({1001}, dtype);
    auto [actual, expected] = on_both(kStates[1], [&](Device device, Generator* generator) {
      Tensor leaf = input.to(device).detach().requires_grad_(true);
      dropout(leaf, 0.4, true, generator).backward(grad.to(device));
      return leaf.grad();
    });
    EXPECT_TRUE(all_close(actual, expected, 0, 0)) << dtype_name(dtype);
  }
}

}  // namespace
}  // namespace ember::testing
