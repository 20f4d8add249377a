// The Gloo backend: collectives over TCP between any hosts, through Debian's
// Gloo (2022 snapshot). Ranks bootstrap through ember's TcpStore (GlooStore
// below), every reduction runs ember's reduce_host_buffers as Gloo's custom
// reduce function (Gloo has no bf16, and f16 only as its own struct), and
// reduce_scatter is a ring of our own (this Gloo has no new-style one).
// Gloo's headers stay in this file: ember's installed headers do not need them.
// Made by make_gloo_backend (backend.h) for init_process_group and new_group;
// tests: tests/distributed/test_collectives.cpp with the "gloo" argument.
#include <signal.h>
#include <unistd.h>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include <climits>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>

#include "core/error.h"
#include "distributed/backend.h"

namespace ember::distributed {
namespace {

// Gloo's rendezvous store, over ember's TcpStore: every key Gloo writes gets
// the group's prefix, and every wait the group's timeout unless Gloo names one.
class GlooStore : public gloo::rendezvous::Store {
 public:
  GlooStore(TcpStore& store, std::string prefix, milliseconds timeout)
      : store_(store), prefix_(std::move(prefix)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    store_.set(prefix_ + key, std::span(reinterpret_cast<const uint8_t*>(data.data()), data.size()));
  }
  std::vector<char> get(const std::string& key) override {
    Bytes value = store_.get(prefix_ + key, timeout_);
    return std::vector<char>(value.begin(), value.end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> prefixed;
    for (const auto& key : keys) prefixed.push_back(prefix_ + key);
    store_.wait(prefixed, timeout);
  }

 private:
  TcpStore& store_;
  std::string prefix_;
  milliseconds timeout_;
};

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host == "ip6-localhost" || host.rfind("127.", 0) == 0;
}

// The address this rank's Gloo device listens on and advertises (Note
// [Choosing a backend]): EMBER_GLOO_ADDR when set; the loopback address when
// the store is on loopback (one host); else this host's name, which its peers
// must be able to resolve (set EMBER_GLOO_ADDR when they cannot).
std::string advertised_address(const BackendContext& context) {
  if (!context.advertise_address.empty()) return context.advertise_address;
  if (is_loopback(context.store->options().host)) return "127.0.0.1";
  char name[HOST_NAME_MAX + 1] = {};
  EMBER_CHECK(gethostname(name, sizeof(name) - 1) == 0, "gloo backend: gethostname failed; set EMBER_GLOO_ADDR");
  return name;
}

// Gloo writes to its sockets without MSG_NOSIGNAL, so a peer that died would
// kill this process with SIGPIPE instead of failing the collective with an
// error (Note [SIGPIPE and Gloo]). Ignored once, unless the program installed
// a handler of its own.
void ignore_sigpipe() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current = {};
    if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) signal(SIGPIPE, SIG_IGN);
  });
}

// Point-to-point slots are the user's tags (< 2^32); Gloo's own collectives
// use slots with a prefix in the top byte; reduce_scatter's ring uses this one.
constexpr uint64_t kReduceScatterSlot = uint64_t(1) << 40;
// Sends handed off but maybe not yet matched by their recv (see send()).
constexpr size_t kMaxPendingSends = 16;

// Calls Gloo's typed setters with a type of the element's size: Gloo only
// uses sizeof(T), and reduces through our function.
template <class F>
void with_element_type(int64_t element_size, F&& f) {
  switch (element_size) {
    case 1: f.template operator()<uint8_t>(); return;
    case 2: f.template operator()<uint16_t>(); return;
    case 4: f.template operator()<uint32_t>(); return;
    case 8: f.template operator()<uint64_t>(); return;
  }
  EMBER_ASSERT(false, "element size {}", element_size);
}

class GlooBackend final : public Backend {
 public:
  explicit GlooBackend(const BackendContext& context) : context_(context) {
    if (context_.size == 1) return;  // a group of one needs no peers (and Gloo's ring wants two)
    ignore_sigpipe();
    const std::string address = advertised_address(context_);
    try {
      gloo::transport::tcp::attr attr;
      attr.hostname = address;
      device_ = gloo::transport::tcp::CreateDevice(attr);
      auto gloo_context = std::make_shared<gloo::rendezvous::Context>(context_.rank, context_.size);
      gloo_context->setTimeout(context_.timeout);
      GlooStore store(*context_.store, context_.store_prefix + "gloo/", context_.timeout);
      gloo_context->connectFullMesh(store, device_);
      gloo_ = std::move(gloo_context);
    } catch (const std::exception& failure) {  // Gloo's errors and the store's
      EMBER_CHECK(false, "gloo backend: rank {} of {} (group {}, address {}) could not connect to its peers: {}",
                  context_.rank, context_.size, context_.store_prefix, address, failure.what());
    }
  }

  ~GlooBackend() override {
    try {
      while (!pending_sends_.empty()) complete_oldest_send();
    } catch (const std::exception&) {
      // A peer that never received is already reported by its own recv's error.
    }
  }

  std::string name() const override { return "gloo"; }
  // Gloo's own algorithms where ember calls Gloo's collectives (the 2022
  // snapshot Debian ships: gloo::allreduce with no algorithm set runs its
  // segmented ring, broadcast a binomial tree, allgather a ring, alltoall
  // pairwise sends to rank + i, barrier a dissemination barrier), and the
  // ring below for reduce_scatter, which Gloo's new API lacks.
  std::string algorithm(Collective collective) const override {
    switch (collective) {
      case Collective::allreduce: return "ring";
      case Collective::broadcast: return "binomial_tree";
      case Collective::allgather: return "ring";
      case Collective::reduce_scatter: return "ring";
      case Collective::all_to_all: return "pairwise_exchange";
      case Collective::barrier: return "dissemination";
      case Collective::send:
      case Collective::recv: return "point_to_point";
    }
    return "?";
  }

  void allreduce(void* data, int64_t count, DType dtype, ReduceOp op) override {
    if (context_.size == 1 || count == 0) return;
    guarded("allreduce", [&] {
      gloo::AllreduceOptions options(gloo_);
      with_element_type(element_size(dtype), [&]<class T>() { options.setOutput(static_cast<T*>(data), size_t(count)); });
      options.setReduceFunction([dtype, op](void* out, const void* a, const void* b, size_t n) {
        reduce_host_buffers(out, a, b, int64_t(n), dtype, op);
      });
      options.setTimeout(context_.timeout);
      gloo::allreduce(options);
    });
  }

  void broadcast(void* data, int64_t nbytes, int root) override {
    if (context_.size == 1 || nbytes == 0) return;
    guarded("broadcast", [&] {
      gloo::BroadcastOptions options(gloo_);
      options.setOutput(static_cast<uint8_t*>(data), size_t(nbytes));
      options.setRoot(root);
      options.setTimeout(context_.timeout);
      gloo::broadcast(options);
    });
  }

  void allgather(const void* input, void* output, int64_t nbytes) override {
    if (nbytes == 0) return;
    if (context_.size == 1) {
      std::memcpy(output, input, size_t(nbytes));
      return;
    }
    guarded("allgather", [&] {
      gloo::AllgatherOptions options(gloo_);
      options.setInput(const_cast<uint8_t*>(static_cast<const uint8_t*>(input)), size_t(nbytes));
      options.setOutput(static_cast<uint8_t*>(output), size_t(nbytes) * size_t(context_.size));
      options.setTimeout(context_.timeout);
      gloo::allgather(options);
    });
  }

  // A ring: in step s, rank r sends its partial sum of block r-s-1 to rank
  // r+1 and adds what rank r-1 sent into block r-s-2. Block b starts at rank
  // b+1 and, after size-1 hops, arrives complete at rank b.
  void reduce_scatter(const void* input, void* output, int64_t count, DType dtype, ReduceOp op) override {
    const size_t block = size_t(count * element_size(dtype));
    if (block == 0) return;
    if (context_.size == 1) {
      std::memcpy(output, input, block);
      return;
    }
    guarded("reduce_scatter", [&] {
      const int size = context_.size, rank = context_.rank;
      std::vector<uint8_t> partial(static_cast<const uint8_t*>(input), static_cast<const uint8_t*>(input) + block * size_t(size));
      std::vector<uint8_t> incoming(block);
      auto partial_buffer = gloo_->createUnboundBuffer(partial.data(), partial.size());
      auto incoming_buffer = gloo_->createUnboundBuffer(incoming.data(), incoming.size());
      const int next = (rank + 1) % size, previous = (rank + size - 1) % size;
      for (int step = 0; step < size - 1; ++step) {
        const size_t send_block = size_t((rank - step - 1 + 2 * size) % size);
        const size_t recv_block = size_t((rank - step - 2 + 2 * size) % size);
        incoming_buffer->recv(previous, kReduceScatterSlot, 0, block);
        partial_buffer->send(next, kReduceScatterSlot, send_block * block, block);
        incoming_buffer->waitRecv(context_.timeout);
        uint8_t* target = partial.data() + recv_block * block;
        reduce_host_buffers(target, target, incoming.data(), count, dtype, op);
        partial_buffer->waitSend(context_.timeout);
      }
      std::memcpy(output, partial.data() + size_t(rank) * block, block);
    });
  }

  void all_to_all(const void* input, void* output, int64_t nbytes) override {
    if (nbytes == 0) return;
    if (context_.size == 1) {
      std::memcpy(output, input, size_t(nbytes));
      return;
    }
    guarded("all_to_all", [&] {
      const size_t total = size_t(nbytes) * size_t(context_.size);
      gloo::AlltoallOptions options(gloo_);
      options.setInput(const_cast<uint8_t*>(static_cast<const uint8_t*>(input)), total);
      options.setOutput(static_cast<uint8_t*>(output), total);
      options.setTimeout(context_.timeout);
      gloo::alltoall(options);
    });
  }

  void barrier() override {
    if (context_.size == 1) return;
    guarded("barrier", [&] {
      gloo::BarrierOptions options(gloo_);
      options.setTimeout(context_.timeout);
      gloo::barrier(options);
    });
  }

  // Gloo's send waits for the receiver to post its recv, so a send is copied
  // and left in flight: the caller's buffer is free at once, and a ring of
  // send-then-recv on one thread cannot deadlock. Only when more than
  // kMaxPendingSends are in flight does the oldest have to be matched first.
  // Each message goes after an 8-byte header with its length: a recv of
  // another size is then an error naming both (Gloo itself reads a shorter
  // message into a longer buffer silently, and aborts the process on a longer one).
  // An empty message is its header alone (collectives of empty buffers return
  // at once: Gloo cannot tell that the peers called the same, see
  // Note [Same collective on every rank]).
  void send(const void* data, int64_t nbytes, int dst, uint32_t tag) override {
    guarded("send", [&] {
      while (pending_sends_.size() >= kMaxPendingSends) complete_oldest_send();
      PendingSend& pending = pending_sends_.emplace_back();
      pending.length = uint64_t(nbytes);
      pending.data.assign(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + nbytes);
      pending.header = gloo_->createUnboundBuffer(&pending.length, sizeof pending.length);
      pending.header->send(dst, tag);
      if (nbytes == 0) return;
      pending.buffer = gloo_->createUnboundBuffer(pending.data.data(), pending.data.size());
      pending.buffer->send(dst, tag);
    });
  }

  void recv(void* data, int64_t nbytes, int src, uint32_t tag) override {
    guarded("recv", [&] {
      uint64_t length = 0;
      auto header = gloo_->createUnboundBuffer(&length, sizeof length);
      header->recv(src, tag);
      header->waitRecv(context_.timeout);
      // Of another size, the message is still read (into scratch), so the
      // next message between the two ranks meets the next recv.
      std::vector<uint8_t> scratch(length == uint64_t(nbytes) ? 0 : length);
      if (length > 0) {
        auto buffer = gloo_->createUnboundBuffer(scratch.empty() ? data : scratch.data(), size_t(length));
        buffer->recv(src, tag);
        buffer->waitRecv(context_.timeout);
      }
      EMBER_CHECK(length == uint64_t(nbytes), "gloo recv from rank {} (tag {}): the message has {} bytes, this recv "
                  "expects {}", src, tag, length, nbytes);
    });
  }

 private:
  struct PendingSend {
    uint64_t length = 0;
    std::vector<uint8_t> data;
    std::unique_ptr<gloo::transport::UnboundBuffer> header;
    std::unique_ptr<gloo::transport::UnboundBuffer> buffer;
  };

  void complete_oldest_send() {
    pending_sends_.front().header->waitSend(context_.timeout);
    if (pending_sends_.front().buffer) pending_sends_.front().buffer->waitSend(context_.timeout);
    pending_sends_.pop_front();
  }

  // Gloo reports failures (a peer's death, its timeouts) as its own
  // exceptions; callers see ember::Error. ProcessGroup adds the call, rank and group.
  void guarded(const char* op, const std::function<void()>& body) {
    try {
      body();
    } catch (const Error&) {
      throw;
    } catch (const std::exception& failure) {
      EMBER_CHECK(false, "gloo {}: {}", op, failure.what());
    }
  }

  BackendContext context_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> gloo_;
  std::deque<PendingSend> pending_sends_;
};

}  // namespace

std::unique_ptr<Backend> make_gloo_backend(const BackendContext& context) {
  return std::make_unique<GlooBackend>(context);
}

}  // namespace ember::distributed
