// Point-to-point messages of the shm backend (Note [Shared-memory
// collectives], "send/recv"): one mailbox, a ring of chunk buffers, per
// ordered pair of ranks. A send never waits for its receiver: what does not
// fit into the mailbox at once is copied and delivered by a progress thread
// (as the Gloo backend copies its sends). A receiver matches by tag: messages
// with other tags that arrive first are read into a queue of their own.
// Used by shm_backend.cpp; tests: tests/distributed/test_shm.cpp.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "distributed/backends/shm_segment.h"
#include "distributed/backends/shm_sync.h"

namespace ember::distributed::shm {

class Mailboxes {
 public:
  Mailboxes(const Segment& segment, int rank, const std::vector<int>& global_ranks, std::chrono::milliseconds timeout);
  // Delivers the sends still queued (each bounded by the timeout), then stops
  // the progress thread.
  ~Mailboxes();
  Mailboxes(const Mailboxes&) = delete;
  Mailboxes& operator=(const Mailboxes&) = delete;

  // Returns once `data` may be reused: written into the mailbox, or copied.
  void send(const void* data, int64_t nbytes, int dst, uint32_t tag);
  // The oldest message from `src` with `tag`; an error if its size is not `nbytes`.
  void recv(void* data, int64_t nbytes, int src, uint32_t tag);
  // The progress thread's error, if delivering a queued send failed ("" if none).
  std::string failure() const;

 private:
  struct Outgoing {
    uint32_t tag = 0;
    int64_t message_bytes = 0;
    int64_t sent = 0;             // bytes of the message in the mailbox so far
    bool started = false;         // its first chunk is out (a 0-byte message has one)
    const std::byte* view = nullptr;  // the caller's bytes, during send() only
    std::vector<std::byte> rest;  // otherwise a copy of bytes [copied_from, message_bytes)
    int64_t copied_from = 0;
  };
  struct Unexpected {
    uint32_t tag = 0;
    std::vector<std::byte> bytes;
  };

  // Writes chunks of `message` to rank dst while the mailbox has room (mutex_
  // held); whether the message is all out.
  bool push(int dst, Outgoing& message);
  bool has_room(int dst) const;
  void progress_loop();
  // Waits for the next chunk from `src` and returns its header.
  MailboxChunkHeader next_header(int src);
  // Reads the message whose first chunk's header is `first` into `out`.
  void read_message(int src, const MailboxChunkHeader& first, std::byte* out);

  const Segment& segment_;
  const int rank_;
  const int64_t capacity_;  // data bytes per mailbox chunk
  Sync receive_sync_;       // used by recv (the caller's thread)
  Sync send_sync_;          // used by the progress thread

  mutable std::mutex mutex_;  // guards everything below, and the outgoing mailboxes
  std::condition_variable work_cv_;
  std::vector<std::deque<Outgoing>> outgoing_;  // per destination
  std::vector<uint64_t> sent_chunks_;           // per destination
  std::atomic<uint64_t> queued_{0};              // bumped per queued send (the progress thread polls it)
  std::string failure_;
  bool stopping_ = false;
  std::thread progress_;

  // The receiving side: only the caller's thread touches these.
  std::vector<uint64_t> received_chunks_;  // per source
  std::vector<std::deque<Unexpected>> unexpected_;  // per source, in arrival order
};

}  // namespace ember::distributed::shm
