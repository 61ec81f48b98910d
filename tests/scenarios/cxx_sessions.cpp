// SPDX-License-Identifier: MIT
//
// cxx_sessions - a C++ web backend: requests are login / page view / logout.
// Logins open a session in an std::unordered_map keyed by session id; page views
// look the session up and build a response from std::string / std::vector /
// std::map temporaries; logouts are supposed to close the session.
//
// Ground truth: logout() erases by the *user name* instead of the session id, so
// sessions are never removed and the session table grows with every login. The
// growing allocation is the map node created in SessionStore::open() (LEAK-SITE).
//
// Options: --seconds S (default 5), --rate REQ_PER_S (default 8000), --seed N,
//          --pidfile PATH
#include "scen_common.h"

#include <cinttypes>
#include <cstdio>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

namespace shop {

struct Session {
  std::string user;
  std::vector<std::string> roles;
  uint64_t created = 0;
  uint64_t last_seen = 0;
  char csrf[48] = {};
  double recent_scores[12] = {};
};

class SessionStore {
 public:
  std::string open(const std::string &user, uint64_t now, uint64_t *rng) {
    char id[40];
    std::snprintf(id, sizeof id, "sess-%016" PRIx64 "-%04x", scen_rand(rng),
                  static_cast<unsigned>(now & 0xffff));
    Session s;
    s.user = user;
    s.roles = {"customer", now % 7 == 0 ? "beta-tester" : "standard"};
    s.created = s.last_seen = now;
    std::snprintf(s.csrf, sizeof s.csrf, "%016" PRIx64, scen_rand(rng));
    auto it = sessions_.emplace(std::string(id), std::move(s)); /* LEAK-SITE */
    return it.first->first;
  }

  Session *find(const std::string &id) {
    auto it = sessions_.find(id);
    return it == sessions_.end() ? nullptr : &it->second;
  }

  void logout(const std::string &id) {
    Session *s = find(id);
    if (!s) return;
    sessions_.erase(s->user);  // bug: erases by user name, not by session id
  }

  size_t size() const { return sessions_.size(); }

 private:
  std::unordered_map<std::string, Session> sessions_;
};

std::string render_page(const Session &s, const std::string &path, uint64_t *rng) {
  std::map<std::string, std::string> headers;
  headers["Content-Type"] = "text/html; charset=utf-8";
  headers["X-User"] = s.user;
  headers["X-Request-Path"] = path;
  std::vector<std::string> items;
  size_t n = scen_range(rng, 1, 30);
  for (size_t i = 0; i < n; i++)
    items.push_back("<li class=\"product-card\">item " + std::to_string(scen_rand(rng) % 100000) +
                    "</li>");
  std::string body = "<html><body><ul>";
  for (const auto &it : items) body += it;
  body += "</ul></body></html>";
  std::string out;
  for (const auto &h : headers) out += h.first + ": " + h.second + "\r\n";
  out += "\r\n" + body;
  return out;
}

}  // namespace shop

int main(int argc, char **argv) {
  double seconds = scen_seconds(argc, argv, 5.0);
  double rate = scen_opt_double(argc, argv, "--rate", "SCEN_RATE", 8000);
  uint64_t rng = static_cast<uint64_t>(scen_opt_long(argc, argv, "--seed", "SCEN_SEED", 2024));
  scen_write_pidfile(argc, argv);
  scen_step_init();

  shop::SessionStore store;
  std::vector<std::string> active;  // ids the simulated clients hold
  scen_pacer pacer;
  scen_pacer_init(&pacer, rate);
  double end = scen_now() + seconds;
  uint64_t now = 0, logins = 0, views = 0, logouts = 0, bytes = 0;
  while (scen_now() < end) {
    now++;
    uint64_t r = scen_range(&rng, 0, 99);
    if (active.size() < 50 || r < 12) {
      std::string user = "customer-" + std::to_string(scen_range(&rng, 1, 200000)) + "@example.org";
      active.push_back(store.open(user, now, &rng));
      logins++;
    } else if (r < 24) {
      size_t k = scen_range(&rng, 0, active.size() - 1);
      store.logout(active[k]);
      active[k] = active.back();
      active.pop_back();
      logouts++;
    } else {
      const std::string &id = active[scen_range(&rng, 0, active.size() - 1)];
      if (shop::Session *s = store.find(id)) {
        s->last_seen = now;
        bytes += shop::render_page(*s, "/catalog/" + std::to_string(r), &rng).size();
      }
      views++;
    }
    scen_step();
    scen_pace(&pacer);
  }
  std::printf("cxx_sessions: logins=%" PRIu64 " views=%" PRIu64 " logouts=%" PRIu64
              " sessions=%zu (clients hold %zu) bytes=%" PRIu64 "\n",
              logins, views, logouts, store.size(), active.size(), bytes);
  return 0;
}
