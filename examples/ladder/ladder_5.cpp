// Step 5 of the ladder (examples/ladder/README.md): mixed precision. The
// forward runs under bf16 autocast: matrix products take bf16 inputs (half
// the bytes to read) and the weights, gradients and optimizer state stay in
// f32. bf16 has f32's exponent range, so small gradients do not underflow and
// no loss scaling is needed (Note [Loss scaling] in distributed/README.md).
// The rounding to bf16 changes the losses in their third digit. Run
//   build/bin/ember launch --nproc-per-node 2 -- build/examples/ladder_5
#include "ladder/ladder.h"

using namespace ember;
namespace F = ember::nn::functional;

namespace {

constexpr int64_t kBucketCapBytes = 2 << 10;  // small, so that this small model gets three buckets

// The gradients of some parameters, back to back in one buffer: one
// reduce-scatter carries them all.
struct Bucket {
  std::vector<Tensor> parameters;
  std::vector<int64_t> offsets;  // where each parameter's gradient starts in buffer
  Tensor buffer;  // gradients, then parameters; padded to split evenly among the ranks
  Tensor shard;       // this rank's piece of the parameters: what its optimizer steps
  Tensor shard_grad;  // this rank's piece of the summed gradients
  int64_t pending = 0;  // parameters whose gradient has not arrived yet in this backward
  std::shared_ptr<distributed::Work> work;
};

// Backward computes the last layer's gradients first, so buckets are filled
// in reverse registration order: bucket 0 is ready first (Note [Bucket order]
// in distributed/README.md).
std::vector<Bucket> make_buckets(const std::vector<Tensor>& parameters, int rank, int world_size) {
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
  NoGradGuard no_grad;
  for (Bucket& bucket : buckets) {
    int64_t piece = (bucket.offsets.back() + bucket.parameters.back().numel() + world_size - 1) / world_size;
    bucket.buffer = zeros({piece * world_size});
    for (size_t slot = 0; slot < bucket.parameters.size(); ++slot)
      bucket.buffer.narrow(0, bucket.offsets[slot], bucket.parameters[slot].numel()).copy_(bucket.parameters[slot].flatten());
    bucket.shard = bucket.buffer.narrow(0, rank * piece, piece).clone().requires_grad_();
    bucket.shard_grad = zeros({piece});
  }
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
  std::vector<Bucket> buckets = make_buckets(model->parameters(), rank, world_size);
  for (Bucket& bucket : buckets) {
    for (size_t slot = 0; slot < bucket.parameters.size(); ++slot) {
      // Runs inside backward, right after this parameter's .grad was written:
      // the communication of a full bucket overlaps the rest of backward
      // (Note [What overlap buys] in examples/ladder/README.md).
      bucket.parameters[slot].register_post_accumulate_grad_hook([&bucket, &group, slot](const Tensor& parameter) {
        bucket.buffer.narrow(0, bucket.offsets[slot], parameter.numel()).copy_(parameter.grad().flatten());
        if (--bucket.pending == 0) bucket.work = group.reduce_scatter(bucket.shard_grad, bucket.buffer);  // returns at once
      });
    }
  }
  std::vector<Tensor> shards;
  for (const Bucket& bucket : buckets) shards.push_back(bucket.shard);
  optim::AdamW optimizer(shards, {.lr = ladder::kLearningRate});
  for (int64_t step = 1; step <= ladder::kSteps; ++step) {
    auto [inputs, targets] = ladder::batch(data, step, rank, world_size);
    Tensor logits;
    {
      AutocastGuard autocast(DeviceType::cpu, DType::bf16);  // the forward only; backward follows its casts
      logits = (*model)(inputs);
    }
    Tensor loss = F::cross_entropy(logits.to(DType::f32), targets);  // the loss in f32
    for (Bucket& bucket : buckets) bucket.pending = int64_t(bucket.parameters.size());
    loss.backward();
    // Backward is over; most reduce-scatters are too. Wait for the rest; the
    // piece of the sums, divided as in step 2, is the shard's gradient.
    for (Bucket& bucket : buckets) {
      bucket.work->wait();
      bucket.shard.set_grad(bucket.shard_grad / world_size);
    }
    optimizer.step();
    // Every rank stepped its piece: gather the pieces, then copy the new
    // values into the model, so every rank has all of them again.
    for (Bucket& bucket : buckets) {
      group.allgather(bucket.buffer, bucket.shard.detach())->wait();
      NoGradGuard no_grad;
      for (size_t slot = 0; slot < bucket.parameters.size(); ++slot) {
        Tensor& parameter = bucket.parameters[slot];
        parameter.copy_(bucket.buffer.narrow(0, bucket.offsets[slot], parameter.numel()).view(parameter.shape()));
      }
    }
    optimizer.zero_grad();
    model->zero_grad();
    ladder::print_loss(step, loss, group);
  }
  return 0;
} catch (const ember::Error& error) {
  std::fprintf(stderr, "error: %s\n", error.what());
  return 1;
}
