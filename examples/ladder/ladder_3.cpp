// Step 3 of the ladder (examples/ladder/README.md): the all-reduces overlap
// backward. The gradients go into a few flat buckets; a hook on each
// parameter copies its gradient in as soon as backward has computed it, and
// a full bucket's all-reduce starts at once, while backward computes the rest.
// The sums are the same as step 2's, so the losses are too. This is what
// DistributedDataParallel does (distributed/ddp/reducer.cpp), without its
// bookkeeping. Run
//   build/bin/ember launch --nproc-per-node 2 -- build/examples/ladder_3
#include "ladder/ladder.h"

using namespace ember;
namespace F = ember::nn::functional;

namespace {

constexpr int64_t kBucketCapBytes = 2 << 10;  // small, so that this small model gets three buckets

// The gradients of some parameters, back to back in one buffer: one
// all-reduce carries them all.
struct Bucket {
  std::vector<Tensor> parameters;
  std::vector<int64_t> offsets;  // where each parameter's gradient starts in buffer
  Tensor buffer;
  int64_t pending = 0;  // parameters whose gradient has not arrived yet in this backward
  std::shared_ptr<distributed::Work> work;
};

// Backward computes the last layer's gradients first, so buckets are filled
// in reverse registration order: bucket 0 is ready first (Note [Bucket order]
// in distributed/README.md).
std::vector<Bucket> make_buckets(const std::vector<Tensor>& parameters) {
  std::vector<Bucket> buckets;
  int64_t numel = kBucketCapBytes;  // so that the first parameter opens a bucket
  for (auto parameter = parameters.rbegin(); parameter != parameters.rend(); ++parameter) {
    if (numel * int64_t(sizeof(float)) >= kBucketCapBytes) {
      buckets.emplace_back();
      numel = 0;
    }
    buckets.back().parameters.push_back(*parameter);
    buckets.back().offsets.push_back(numel);
    numel += parameter->numel();
  }
  for (Bucket& bucket : buckets) bucket.buffer = zeros({bucket.offsets.back() + bucket.parameters.back().numel()});
  return buckets;
}

}  // namespace

int main() try {
  distributed::ProcessGroup& group = distributed::init_process_group();
  const int rank = group.rank(), world_size = group.size();
  ladder::Data data = ladder::make_data();
  std::shared_ptr<nn::Sequential> model = ladder::make_model();
  // The seed gave every rank the same weights; rank 0's copy makes sure.
  for (const Tensor& parameter : model->parameters()) group.broadcast(parameter, /*root=*/0)->wait();
  std::vector<Bucket> buckets = make_buckets(model->parameters());
  for (Bucket& bucket : buckets) {
    for (size_t slot = 0; slot < bucket.parameters.size(); ++slot) {
      // Runs inside backward, right after this parameter's .grad was written:
      // the communication of a full bucket overlaps the rest of backward
      // (Note [What overlap buys] in examples/ladder/README.md).
      bucket.parameters[slot].register_post_accumulate_grad_hook([&bucket, &group, slot](const Tensor& parameter) {
        bucket.buffer.narrow(0, bucket.offsets[slot], parameter.numel()).copy_(parameter.grad().flatten());
        if (--bucket.pending == 0) bucket.work = group.allreduce(bucket.buffer);  // returns at once
      });
    }
  }
  optim::AdamW optimizer(model->parameters(), {.lr = ladder::kLearningRate});
  for (int64_t step = 1; step <= ladder::kSteps; ++step) {
    auto [inputs, targets] = ladder::batch(data, step, rank, world_size);
    Tensor loss = F::cross_entropy((*model)(inputs), targets);
    for (Bucket& bucket : buckets) bucket.pending = int64_t(bucket.parameters.size());
    loss.backward();
    // Backward is over; most all-reduces are too. Wait for the rest, then
    // copy the sums back into the gradients, divided as in step 2.
    for (Bucket& bucket : buckets) {
      bucket.work->wait();
      for (size_t slot = 0; slot < bucket.parameters.size(); ++slot) {
        Tensor grad = bucket.parameters[slot].grad();
        grad.copy_(bucket.buffer.narrow(0, bucket.offsets[slot], grad.numel()).view(grad.shape()));
        grad /= world_size;
      }
    }
    optimizer.step();
    optimizer.zero_grad();
    ladder::print_loss(step, loss, group);
  }
  return 0;
} catch (const ember::Error& error) {
  std::fprintf(stderr, "error: %s\n", error.what());
  return 1;
}
