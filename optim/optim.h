// The optim layer in one include: optimizers, learning-rate schedulers and
// gradient clipping (see optim/README.md).
#pragma once

#include "optim/adagrad.h"
#include "optim/adam.h"
#include "optim/clip_grad.h"
#include "optim/lion.h"
#include "optim/optimizer.h"
#include "optim/rmsprop.h"
#include "optim/scheduler.h"
#include "optim/scheduler_one_cycle.h"
#include "optim/scheduler_plateau.h"
#include "optim/scheduler_sequential.h"
#include "optim/scheduler_warmup.h"
#include "optim/sgd.h"
