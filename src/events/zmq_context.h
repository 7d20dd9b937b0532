// src/events/zmq_context.h (internal): the ZeroMQ context kvbm's event sockets live in.
//
// libzmq hands a received message's bytes out of its I/O thread's receive buffer ("zero-copy
// receive"), shares that buffer between the messages cut from it with a reference count kept
// by atomics inside libzmq, and may free it on its I/O thread once the last message is closed.
// Those atomics are not instrumented, so ThreadSanitizer sees the receiving thread's read of
// the bytes and the I/O thread's free with nothing ordering them, and reports a race (seen in
// the python-tsan stage, decoding a batch). With zero-copy receive off, each message owns a
// copy of its bytes and is freed by the thread that closes it. KV event batches are small; the
// copy costs nothing measurable.

#pragma once

#include <zmq.h>

#include <zmq.hpp>

namespace kvbm::events {

/// A context whose received messages own their bytes (see the file comment).
inline zmq::context_t make_zmq_context() {
  zmq::context_t context;
  // ZMQ_ZERO_COPY_RECV is a context option of libzmq 4.3's draft API; a libzmq built without
  // it refuses the call (EINVAL) and keeps its default, which is only a sanitizer's concern.
  constexpr int kZeroCopyRecv = 10;  // ZMQ_ZERO_COPY_RECV
  (void)zmq_ctx_set(context.handle(), kZeroCopyRecv, 0);
  return context;
}

}  // namespace kvbm::events
