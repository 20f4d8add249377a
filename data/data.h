// The data layer in one include: datasets, samplers, DataLoader and the file
// readers (IDX, CSV, MNIST). See data/README.md.
#pragma once

#include "data/csv.h"
#include "data/dataloader.h"
#include "data/dataset.h"
#include "data/distributed_sampler.h"
#include "data/example.h"
#include "data/idx.h"
#include "data/mnist.h"
#include "data/sampler.h"
#include "data/sharded_batch_sampler.h"
