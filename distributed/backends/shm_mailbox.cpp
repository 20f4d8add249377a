// send/recv of the shm backend through per-pair mailboxes (shm_mailbox.h,
// Note [Shared-memory collectives]). Tests: tests/distributed/test_shm.cpp.
#include "distributed/backends/shm_mailbox.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "core/error.h"

namespace ember::distributed::shm {

Mailboxes::Mailboxes(const Segment& segment, int rank, const std::vector<int>& global_ranks,
                     std::chrono::milliseconds timeout)
    : segment_(segment),
      rank_(rank),
      capacity_(int64_t(segment.layout().mailbox_chunk_bytes - sizeof(MailboxChunkHeader))),
      receive_sync_(segment, rank, global_ranks, timeout),
      send_sync_(segment, rank, global_ranks, timeout),
      outgoing_(size_t(segment.layout().ranks)),
      sent_chunks_(size_t(segment.layout().ranks), 0),
      received_chunks_(size_t(segment.layout().ranks), 0),
      unexpected_(size_t(segment.layout().ranks)) {}

Mailboxes::~Mailboxes() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  if (progress_.joinable()) progress_.join();
}

std::string Mailboxes::failure() const {
  std::lock_guard lock(mutex_);
  return failure_;
}

bool Mailboxes::has_room(int dst) const {
  uint64_t consumed = segment_.mailbox(rank_, dst).consumed.value.load(std::memory_order_acquire);
  return sent_chunks_[size_t(dst)] - consumed < segment_.layout().mailbox_depth;
}

bool Mailboxes::push(int dst, Outgoing& message) {
  const size_t depth = segment_.layout().mailbox_depth;
  MailboxControl& mailbox = segment_.mailbox(rank_, dst);
  while (!message.started || message.sent < message.message_bytes) {
    if (!has_room(dst)) return false;
    uint64_t k = sent_chunks_[size_t(dst)];
    std::byte* buffer = segment_.mailbox_buffer(rank_, dst, size_t(k % depth));
    int64_t length = std::min(capacity_, message.message_bytes - message.sent);
    MailboxChunkHeader header{message.tag, uint64_t(message.message_bytes), uint64_t(message.sent), uint64_t(length)};
    std::memcpy(buffer, &header, sizeof(header));
    const std::byte* from = message.view ? message.view + message.sent
                                         : message.rest.data() + (message.sent - message.copied_from);
    if (length > 0) std::memcpy(buffer + sizeof(header), from, size_t(length));
    send_sync_.publish(mailbox.produced, k + 1);
    sent_chunks_[size_t(dst)] = k + 1;
    message.sent += length;
    message.started = true;
  }
  return true;
}

void Mailboxes::send(const void* data, int64_t nbytes, int dst, uint32_t tag) {
  std::unique_lock lock(mutex_);
  EMBER_CHECK(failure_.empty(), "shm send of {} bytes to rank {} (tag {}): an earlier send failed: {}", nbytes, dst, tag,
              failure_);
  Outgoing message;
  message.tag = tag;
  message.message_bytes = nbytes;
  message.view = static_cast<const std::byte*>(data);
  // Behind queued messages to dst it must wait its turn; else as much as fits goes now.
  if (outgoing_[size_t(dst)].empty() && push(dst, message)) return;
  message.copied_from = message.sent;
  message.rest.assign(message.view + message.sent, message.view + nbytes);
  message.view = nullptr;
  outgoing_[size_t(dst)].push_back(std::move(message));
  queued_.fetch_add(1, std::memory_order_release);
  if (!progress_.joinable()) progress_ = std::thread([this] { progress_loop(); });
  lock.unlock();
  work_cv_.notify_all();
  send_sync_.wake_sleepers();
}

// The progress thread: pushes queued messages as receivers free mailbox
// chunks; sleeps on the segment's futex word (bumped by the receivers'
// consumed counters, and by send() when it queues more) meanwhile.
void Mailboxes::progress_loop() {
  std::unique_lock lock(mutex_);
  auto anything_queued = [&] {
    return std::any_of(outgoing_.begin(), outgoing_.end(), [](const auto& queue) { return !queue.empty(); });
  };
  for (;;) {
    work_cv_.wait(lock, [&] { return stopping_ || anything_queued(); });
    if (!anything_queued()) return;
    std::vector<int> blocked;
    std::vector<uint64_t> blocked_at;  // sent_chunks_ of each blocked destination
    std::string head;
    for (int dst = 0; dst < int(outgoing_.size()); ++dst) {
      auto& queue = outgoing_[size_t(dst)];
      while (!queue.empty() && push(dst, queue.front())) queue.pop_front();
      if (queue.empty()) continue;
      blocked.push_back(dst);
      blocked_at.push_back(sent_chunks_[size_t(dst)]);
      head += fmt::format("{}{} bytes to rank {} (tag {})", head.empty() ? "" : ", ", queue.front().message_bytes, dst,
                          queue.front().tag);
    }
    if (blocked.empty()) continue;
    const uint64_t queued = queued_.load(std::memory_order_acquire);
    lock.unlock();
    // Blocked until some receiver frees a chunk or send() queues more.
    auto stuck = [&](int) {
      if (queued_.load(std::memory_order_acquire) != queued) return false;
      for (size_t i = 0; i < blocked.size(); ++i) {
        uint64_t consumed = segment_.mailbox(rank_, blocked[i]).consumed.value.load(std::memory_order_acquire);
        if (blocked_at[i] - consumed < segment_.layout().mailbox_depth) return false;
      }
      return true;
    };
    try {
      send_sync_.begin(fmt::format("delivering queued send(s) of {}", head));
      send_sync_.wait_while(stuck, blocked);
    } catch (const Error& error) {
      lock.lock();
      failure_ = error.what();
      for (auto& queue : outgoing_) queue.clear();
      continue;  // the next wait returns at once if stopping, else when more is queued
    }
    lock.lock();
  }
}

MailboxChunkHeader Mailboxes::next_header(int src) {
  uint64_t k = received_chunks_[size_t(src)];
  MailboxControl& mailbox = segment_.mailbox(src, rank_);
  receive_sync_.wait([&](int) -> Counter& { return mailbox.produced; }, k + 1, std::span<const int>(&src, 1));
  MailboxChunkHeader header;
  std::memcpy(&header, segment_.mailbox_buffer(src, rank_, size_t(k % segment_.layout().mailbox_depth)), sizeof(header));
  return header;
}

void Mailboxes::read_message(int src, const MailboxChunkHeader& first, std::byte* out) {
  MailboxControl& mailbox = segment_.mailbox(src, rank_);
  MailboxChunkHeader header = first;
  for (;;) {
    uint64_t k = received_chunks_[size_t(src)];
    const std::byte* buffer = segment_.mailbox_buffer(src, rank_, size_t(k % segment_.layout().mailbox_depth));
    if (header.bytes > 0) std::memcpy(out + header.offset, buffer + sizeof(header), header.bytes);
    receive_sync_.publish(mailbox.consumed, k + 1);
    received_chunks_[size_t(src)] = k + 1;
    if (header.offset + header.bytes >= header.message_bytes) return;
    uint64_t next_offset = header.offset + header.bytes;
    header = next_header(src);
    EMBER_ASSERT(header.tag == first.tag && header.message_bytes == first.message_bytes && header.offset == next_offset,
                 "mailbox from rank {}: chunk of tag {} at offset {}, expected tag {} at offset {}", src, header.tag,
                 header.offset, first.tag, next_offset);
  }
}

void Mailboxes::recv(void* data, int64_t nbytes, int src, uint32_t tag) {
  receive_sync_.begin(fmt::format("recv of {} bytes from rank {} (tag {})", nbytes, src, tag));
  auto size_error = [&](uint64_t message_bytes) {
    return fmt::format("shm recv from rank {} (tag {}): the message has {} bytes, this recv expects {}", src, tag,
                       message_bytes, nbytes);
  };
  auto& early = unexpected_[size_t(src)];
  for (auto it = early.begin(); it != early.end(); ++it) {
    if (it->tag != tag) continue;
    EMBER_CHECK(int64_t(it->bytes.size()) == nbytes, "{}", size_error(it->bytes.size()));
    if (nbytes > 0) std::memcpy(data, it->bytes.data(), size_t(nbytes));
    early.erase(it);
    return;
  }
  for (;;) {
    MailboxChunkHeader first = next_header(src);
    EMBER_ASSERT(first.offset == 0, "mailbox from rank {}: a message starts at offset {}", src, first.offset);
    if (first.tag == tag && first.message_bytes == uint64_t(nbytes)) {
      read_message(src, first, static_cast<std::byte*>(data));
      return;
    }
    // Another tag's message (or this tag's, of another size): keep it for its own recv.
    Unexpected& kept = early.emplace_back();
    kept.tag = uint32_t(first.tag);
    kept.bytes.resize(first.message_bytes);
    read_message(src, first, kept.bytes.data());
    EMBER_CHECK(first.tag != tag, "{}", size_error(first.message_bytes));
  }
}

}  // namespace ember::distributed::shm
