// (filled by the shape gradient family)
#include "autograd/functions/families.h"

namespace ember::autograd {
void register_shape_functions() {}
}  // namespace ember::autograd
