// (filled by the matmul family)
#include "kernels/reference/families.h"

namespace ember::reference {
void register_matmul_kernels() {}
}  // namespace ember::reference
