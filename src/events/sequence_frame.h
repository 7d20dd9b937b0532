// src/events/sequence_frame.h: the 8-byte big-endian sequence frame of the
// ZeroMQ event protocol (vLLM's), written by ZmqEventSink and read by it (a
// replay request) and by ZmqEventSubscriber. -1, all ones, ends a replay.
//
// Thread-safety: plain functions.

#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <zmq.hpp>

namespace kvbm::events::wire {

/// Returns `v` as 8 bytes, most significant first.
inline std::array<std::uint8_t, 8> big_endian(std::uint64_t v) {
  std::array<std::uint8_t, 8> out{};
  for (int i = 7; i >= 0; --i) {
    out[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(v & 0xffU);
    v >>= 8;
  }
  return out;
}

/// Returns the number in the first (at most 8) bytes of `m`, most significant first.
inline std::uint64_t from_big_endian(const zmq::message_t& m) {
  std::uint64_t v = 0;
  const auto* p = static_cast<const std::uint8_t*>(m.data());
  for (std::size_t i = 0; i < m.size() && i < 8; ++i) v = (v << 8) | p[i];
  return v;
}

}  // namespace kvbm::events::wire
