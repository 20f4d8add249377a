// (filled by the random family)
#include "kernels/reference/families.h"

namespace ember::reference {
void register_random_kernels() {}
}  // namespace ember::reference
