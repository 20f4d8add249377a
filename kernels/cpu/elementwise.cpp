// The CPU element-wise family, registered in parts (one file per kind of op).
#include "kernels/cpu/families.h"

namespace ember::cpu {

void register_elementwise_binary_kernels();   // elementwise_binary.cpp
void register_elementwise_unary_kernels();    // elementwise_unary.cpp
void register_elementwise_compare_kernels();  // elementwise_compare.cpp
void register_elementwise_addcmul_kernels();  // elementwise_addcmul.cpp
void register_elementwise_backward_kernels();  // elementwise_backward.cpp

void register_elementwise_kernels() {
  register_elementwise_binary_kernels();
  register_elementwise_unary_kernels();
  register_elementwise_compare_kernels();
  register_elementwise_addcmul_kernels();
  register_elementwise_backward_kernels();
}

}  // namespace ember::cpu
