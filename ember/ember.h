// ember's public API in one include: #include <ember/ember.h>
#pragma once

#include "core/allocator.h"
#include "core/device.h"
#include "core/dispatch.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/ops/conv.h"
#include "core/ops/creation.h"
#include "core/ops/elementwise.h"
#include "core/ops/indexing.h"
#include "core/ops/linalg.h"
#include "core/ops/reduction.h"
#include "core/ops/views.h"
#include "core/parallel.h"
#include "core/random.h"
#include "core/tensor.h"
#include "core/version.h"
