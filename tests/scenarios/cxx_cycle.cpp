// SPDX-License-Identifier: MIT
//
// cxx_cycle - a C++ chat gateway: every client connection is a shared_ptr-managed
// Connection that owns a protocol Handler; the Handler keeps a shared_ptr back
// to its Connection (it should be a weak_ptr). When a client disconnects the
// gateway drops its reference, but the cycle keeps both objects alive forever.
// Connections live for a random time; about 400 are open at any moment.
//
// Ground truth: the Connection allocation (std::make_shared) in
// Gateway::accept() (LEAK-SITE) grows without bound.
//
// Options: --seconds S (default 5), --rate EVENTS_PER_S (default 20000),
//          --seed N, --pidfile PATH
#include "scen_common.h"

#include <array>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace chat {

class Connection;

class Handler {
 public:
  explicit Handler(std::shared_ptr<Connection> c) : conn_(std::move(c)) {}
  size_t on_message(const std::string &msg);

 private:
  std::shared_ptr<Connection> conn_;  // bug: should be std::weak_ptr
  unsigned long messages_ = 0;
};

class Connection {
 public:
  explicit Connection(uint64_t id) : id_(id) { recv_buf_.fill(0); }
  void attach(std::unique_ptr<Handler> h) { handler_ = std::move(h); }
  Handler *handler() { return handler_.get(); }
  uint64_t id() const { return id_; }
  std::array<char, 640> &recv_buf() { return recv_buf_; }

 private:
  uint64_t id_;
  std::array<char, 640> recv_buf_;
  std::unique_ptr<Handler> handler_;
};

size_t Handler::on_message(const std::string &msg) {
  messages_++;
  auto &buf = conn_->recv_buf();
  size_t n = msg.size() < buf.size() ? msg.size() : buf.size();
  for (size_t i = 0; i < n; i++) buf[i] = msg[i];
  return n + messages_;
}

class Gateway {
 public:
  void accept(uint64_t id) {
    auto conn = std::make_shared<Connection>(id); /* LEAK-SITE */
    conn->attach(std::make_unique<Handler>(conn));
    open_.push_back(std::move(conn));
  }

  void disconnect(size_t k) {
    open_[k] = std::move(open_.back());
    open_.pop_back();  // the Connection <-> Handler cycle keeps both alive
  }

  size_t deliver(size_t k, const std::string &msg) { return open_[k]->handler()->on_message(msg); }
  size_t open() const { return open_.size(); }

 private:
  std::vector<std::shared_ptr<Connection>> open_;
};

}  // namespace chat

int main(int argc, char **argv) {
  double seconds = scen_seconds(argc, argv, 5.0);
  double rate = scen_opt_double(argc, argv, "--rate", "SCEN_RATE", 20000);
  uint64_t rng = static_cast<uint64_t>(scen_opt_long(argc, argv, "--seed", "SCEN_SEED", 12));
  scen_write_pidfile(argc, argv);
  scen_step_init();

  chat::Gateway gw;
  scen_pacer pacer;
  scen_pacer_init(&pacer, rate);
  double end = scen_now() + seconds;
  uint64_t next_id = 1, accepted = 0, closed = 0, bytes = 0;
  while (scen_now() < end) {
    uint64_t r = scen_range(&rng, 0, 999);
    size_t open = gw.open();
    if (open < 400 ? r < 80 : r < 40) {
      gw.accept(next_id++);
      accepted++;
    } else if (open > 0 && r < 80) {
      gw.disconnect(scen_range(&rng, 0, open - 1));
      closed++;
    } else if (open > 0) {
      std::string msg = "MSG #" + std::to_string(next_id) + " ";
      msg.append(scen_logsize(&rng, 8, 4000), 'x');
      bytes += gw.deliver(scen_range(&rng, 0, open - 1), msg);
    }
    scen_step();
    scen_pace(&pacer);
  }
  std::printf("cxx_cycle: accepted=%llu closed=%llu open=%zu bytes=%llu\n",
              static_cast<unsigned long long>(accepted), static_cast<unsigned long long>(closed),
              gw.open(), static_cast<unsigned long long>(bytes));
  return 0;
}
