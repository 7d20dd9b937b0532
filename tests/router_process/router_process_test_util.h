// tests/router_process/router_process_test_util.h: what the kvbm-router tests share:
// a real HTTP client (libcurl) and real event publishers on loopback: kvbm's own
// (KvEventPublisher on a ZmqEventSink, with replay) and one written from vLLM's
// wire protocol with vLLM's original positional layout (a PUB, no replay).

#pragma once

#include <chrono>
#include <cstdint>
#include <curl/curl.h>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kvbm/config.h"
#include "kvbm/events/event_sink.h"
#include "kvbm/events/kv_events.h"
#include "kvbm/events/zmq_event_subscriber.h"

#if KVBM_HAVE_ZMQ
#include <zmq.hpp>
#endif

namespace kvbm::router_process::test {

using namespace std::chrono_literals;

struct HttpResponse {
  long status = 0;
  std::string body;
  std::string content_type;
  std::string error;  ///< curl's, when the request did not complete
};

/// One keep-alive HTTP connection (a curl easy handle); not thread-safe.
class HttpClient {
 public:
  HttpClient() : curl_(curl_easy_init()) {}
  ~HttpClient() { curl_easy_cleanup(curl_); }
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  HttpResponse request(const std::string& method, const std::string& url,
                       const std::string& body = {}) {
    HttpResponse r;
    curl_easy_reset(curl_);
    curl_easy_setopt(curl_, CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl_, CURLOPT_CUSTOMREQUEST, method.c_str());
    curl_easy_setopt(curl_, CURLOPT_WRITEFUNCTION, &append);
    curl_easy_setopt(curl_, CURLOPT_WRITEDATA, &r.body);
    curl_easy_setopt(curl_, CURLOPT_TIMEOUT, 30L);
    curl_easy_setopt(curl_, CURLOPT_NOSIGNAL, 1L);
    curl_slist* headers = nullptr;
    if (method == "POST") {
      headers = curl_slist_append(headers, "Content-Type: application/json");
      curl_easy_setopt(curl_, CURLOPT_HTTPHEADER, headers);
      curl_easy_setopt(curl_, CURLOPT_POSTFIELDS, body.c_str());
      curl_easy_setopt(curl_, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
    }
    const CURLcode rc = curl_easy_perform(curl_);
    if (rc != CURLE_OK) {
      r.error = curl_easy_strerror(rc);
    } else {
      curl_easy_getinfo(curl_, CURLINFO_RESPONSE_CODE, &r.status);
      char* ct = nullptr;
      curl_easy_getinfo(curl_, CURLINFO_CONTENT_TYPE, &ct);
      if (ct != nullptr) r.content_type = ct;
    }
    curl_slist_free_all(headers);
    return r;
  }
  HttpResponse get(const std::string& url) { return request("GET", url); }
  HttpResponse post(const std::string& url, const std::string& body) {
    return request("POST", url, body);
  }

 private:
  static std::size_t append(char* data, std::size_t size, std::size_t n, void* out) {
    static_cast<std::string*>(out)->append(data, size * n);
    return size * n;
  }
  CURL* curl_;
};

#if KVBM_HAVE_ZMQ

/// kvbm's own publisher on ephemeral loopback ports, with a replay socket.
struct KvbmPublisher {
  explicit KvbmPublisher(std::string name) {
    events::ZmqEventSinkOptions zo;
    zo.endpoint = "tcp://127.0.0.1:*";
    zo.replay_endpoint = "tcp://127.0.0.1:*";
    zo.topic = "kv-events";
    zo.linger = 0ms;
    sink = std::make_shared<events::ZmqEventSink>(zo);
    events::KvEventPublisherOptions po;
    po.background_flush = false;
    publisher = std::make_unique<events::KvEventPublisher>(sink, po);
    source = {std::move(name), sink->endpoint(), "kv-events", sink->replay_endpoint()};
  }
  /// Publishes one batch of BlockStored `hashes` in `medium`; returns its sequence number.
  std::uint64_t store(std::vector<std::uint64_t> hashes, std::string medium = "GPU") {
    events::BlockStored e;
    e.block_hashes = std::move(hashes);
    e.block_size = 16;
    e.medium = std::move(medium);
    publisher->record(std::move(e));
    publisher->flush();
    return sent++;
  }
  /// "NAME=ENDPOINT;replay=ENDPOINT;topic=kv-events", as --instance takes it.
  [[nodiscard]] std::string spec() const {
    return source.name + "=" + source.endpoint + ";replay=" + source.replay_endpoint +
           ";topic=" + source.topic;
  }
  std::shared_ptr<events::ZmqEventSink> sink;
  std::unique_ptr<events::KvEventPublisher> publisher;
  events::EventSource source;
  std::uint64_t sent = 0;
};

/// A publisher written from vLLM's protocol: [topic, seq (8 bytes, big-endian),
/// payload] on a PUB socket, the payload in vLLM's original positional layout
/// (WireLayout::kArray); no replay socket, as vLLM without a replay endpoint.
class VllmStylePublisher {
 public:
  explicit VllmStylePublisher(std::string name) : pub_(ctx_, zmq::socket_type::pub) {
    pub_.set(zmq::sockopt::linger, 0);
    pub_.bind("tcp://127.0.0.1:*");
    source = {std::move(name), pub_.get(zmq::sockopt::last_endpoint), "", ""};
  }
  void store(std::vector<std::uint64_t> hashes, std::string medium = "GPU") {
    events::BlockStored e;
    e.block_hashes = std::move(hashes);
    e.block_size = 16;
    e.medium = std::move(medium);
    events::KvEventBatch b;
    b.events.push_back(std::move(e));
    const auto payload = events::encode_kv_event_batch(b, events::WireLayout::kArray);
    std::uint8_t seq[8];
    for (int i = 0; i < 8; ++i) seq[i] = static_cast<std::uint8_t>(sent_ >> (56 - 8 * i));
    ++sent_;
    pub_.send(zmq::buffer(source.topic), zmq::send_flags::sndmore);
    pub_.send(zmq::buffer(seq, 8), zmq::send_flags::sndmore);
    pub_.send(zmq::buffer(payload), zmq::send_flags::none);
  }
  events::EventSource source;

 private:
  zmq::context_t ctx_;
  zmq::socket_t pub_;
  std::uint64_t sent_ = 0;
};

#endif  // KVBM_HAVE_ZMQ

/// Returns true once `pred` holds, false after 10 s. For what nothing signals
/// across a process boundary (a PUB's slow joiner, an instance going silent):
/// it paces itself at 5 ms.
inline bool poll_until(const std::function<bool()>& pred) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

}  // namespace kvbm::router_process::test
