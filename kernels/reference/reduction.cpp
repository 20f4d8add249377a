// (filled by the reduction family)
#include "kernels/reference/families.h"

namespace ember::reference {
void register_reduction_kernels() {}
}  // namespace ember::reference
