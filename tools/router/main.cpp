// kvbm-router: routes requests to the engine instance that holds their
// prefix, fed by the instances' KV events, over HTTP/JSON. See
// docs/router.md ("The router process"), or run with --help.

#include <csignal>
#include <cstdio>
#include <exception>
#include <string>

#include <fmt/format.h>

#include "router/http_server.h"
#include "router/options.h"
#include "router/router_service.h"

int main(int argc, char** argv) {
  using namespace kvbm::router_process;
  RouterProcessOptions options;
  try {
    options = parse_router_options(argc, argv);
  } catch (const std::exception& e) {
    fmt::print(stderr, "kvbm-router: {}\n", e.what());
    return 2;
  }
  if (options.help) {
    fmt::print("{}", router_usage());
    return 0;
  }
  // SIGINT and SIGTERM end the process cleanly: blocked here (every thread
  // started below inherits the mask) and taken by sigwait() at the end.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  try {
    RouterService service(options);
    HttpServer server(
        options.listen_address, options.listen_port, options.http_threads,
        [&service](const HttpRequest& r) { return service.handle(r); }, options.max_body_bytes);
    fmt::print("kvbm-router: listening on {} ({} instances, policy {})\n", server.url(),
               options.instances.size(), kvbm::router::to_string(options.router.policy));
    std::fflush(stdout);
    int sig = 0;
    sigwait(&stop, &sig);
    fmt::print(stderr, "kvbm-router: signal {}, stopping\n", sig);
  } catch (const std::exception& e) {
    fmt::print(stderr, "kvbm-router: {}\n", e.what());
    return 1;
  }
  return 0;
}
