// (filled by the indexing gradient family)
#include "autograd/functions/families.h"

namespace ember::autograd {
void register_indexing_functions() {}
}  // namespace ember::autograd
