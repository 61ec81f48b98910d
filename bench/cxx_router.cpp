// SPDX-License-Identifier: MIT
//
// cxx_router - an allocation-heavy C++ HTTP server for the recorder's cost on a real
// kind of program (issue #32). Not a test: bench/server_bench.py drives it with wrk.
//
//   cxx_router [--port P] [--threads N]      (loopback only; default port 8089, 1 thread)
//
// HTTP/1.1 keep-alive over epoll, one event loop per thread (SO_REUSEPORT). Each request
// is parsed into a shared_ptr<Request> (method, path, headers in an unordered_map, the
// query in a map), routed through a table of std::function handlers by prefix, and
// answered with JSON built from a vector of shared_ptr<Item> the handler makes: several
// dozen small allocations and frees per request, as in a typical C++ service.
//   GET /items?n=K&q=WORD   K items (default 16) whose names contain WORD
//   GET /user/NAME          one user record
//   anything else           404
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace {

struct Request {
  std::string method, path, query_string;
  std::unordered_map<std::string, std::string> headers;
  std::map<std::string, std::string> query;
};

struct Item {
  long id;
  std::string name;
  std::vector<std::string> tags;
  double score;
};

struct Response {
  int status = 200;
  std::string body;
};

using Handler = std::function<Response(const std::shared_ptr<Request> &)>;

std::string json_escape(const std::string &s) {
  std::string o;
  o.reserve(s.size() + 2);
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o;
}

Response items(const std::shared_ptr<Request> &r) {
  auto it = r->query.find("n");
  long n = it == r->query.end() ? 16 : std::strtol(it->second.c_str(), nullptr, 10);
  if (n < 0 || n > 1000) n = 16;
  std::string q = r->query.count("q") ? r->query.at("q") : "item";
  std::vector<std::shared_ptr<Item>> list;
  for (long i = 0; i < n; i++) {
    auto item = std::make_shared<Item>();
    item->id = i;
    item->name = q + "-" + std::to_string(i * 7919 % 1000);
    item->tags = {"alpha", "beta-" + std::to_string(i % 5), q};
    item->score = (double)(i * 31 % 97) / 9.7;
    list.push_back(std::move(item));
  }
  std::ostringstream out;
  out << "{\"items\":[";
  for (size_t i = 0; i < list.size(); i++) {
    const Item &x = *list[i];
    out << (i ? "," : "") << "{\"id\":" << x.id << ",\"name\":\"" << json_escape(x.name) << "\",\"tags\":[";
    for (size_t k = 0; k < x.tags.size(); k++) out << (k ? "," : "") << '"' << json_escape(x.tags[k]) << '"';
    out << "],\"score\":" << x.score << "}";
  }
  out << "],\"agent\":\"" << json_escape(r->headers.count("user-agent") ? r->headers.at("user-agent") : "") << "\"}";
  return {200, out.str()};
}

Response user(const std::shared_ptr<Request> &r) {
  std::string name = r->path.substr(6);
  std::ostringstream out;
  out << "{\"user\":\"" << json_escape(name) << "\",\"groups\":[\"staff\",\"" << json_escape(name) << "-team\"]}";
  return {200, out.str()};
}

const std::vector<std::pair<std::string, Handler>> &routes() {
  static const std::vector<std::pair<std::string, Handler>> table = {{"/items", items}, {"/user/", user}};
  return table;
}

std::shared_ptr<Request> parse(const std::string &head) {
  auto r = std::make_shared<Request>();
  std::istringstream in(head);
  std::string line, target, version;
  std::getline(in, line);
  std::istringstream first(line);
  first >> r->method >> target >> version;
  size_t qm = target.find('?');
  r->path = target.substr(0, qm);
  if (qm != std::string::npos) {
    r->query_string = target.substr(qm + 1);
    std::istringstream qs(r->query_string);
    std::string kv;
    while (std::getline(qs, kv, '&')) {
      size_t eq = kv.find('=');
      r->query[kv.substr(0, eq)] = eq == std::string::npos ? "" : kv.substr(eq + 1);
    }
  }
  while (std::getline(in, line) && line != "\r") {
    size_t c = line.find(':');
    if (c == std::string::npos) continue;
    std::string k = line.substr(0, c), v = line.substr(c + 1);
    for (auto &ch : k) ch = (char)std::tolower((unsigned char)ch);
    while (!v.empty() && (v.front() == ' ')) v.erase(0, 1);
    if (!v.empty() && v.back() == '\r') v.pop_back();
    r->headers.emplace(std::move(k), std::move(v));
  }
  return r;
}

std::string answer(const std::string &head) {
  auto req = parse(head);
  Response resp{404, "{\"error\":\"not found\"}"};
  for (const auto &[prefix, handler] : routes())
    if (req->path.compare(0, prefix.size(), prefix) == 0) {
      resp = handler(req);
      break;
    }
  std::string out = "HTTP/1.1 " + std::to_string(resp.status) + (resp.status == 200 ? " OK" : " Not Found") +
                    "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(resp.body.size()) +
                    "\r\n\r\n";
  out += resp.body;
  return out;
}

int listen_on(int port) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  int one = 1;
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  setsockopt(s, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(s, (sockaddr *)&a, sizeof a) != 0 || listen(s, 1024) != 0) {
    std::perror("cxx_router: bind/listen");
    std::exit(1);
  }
  return s;
}

void loop(int port) {
  int ls = listen_on(port), ep = epoll_create1(0);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = ls;
  epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev);
  std::unordered_map<int, std::string> pending;
  epoll_event evs[64];
  char buf[16384];
  for (;;) {
    int n = epoll_wait(ep, evs, 64, -1);
    for (int i = 0; i < n; i++) {
      int fd = evs[i].data.fd;
      if (fd == ls) {
        int c;
        while ((c = accept4(ls, nullptr, nullptr, SOCK_NONBLOCK)) >= 0) {
          int one = 1;
          setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          epoll_event ce{};
          ce.events = EPOLLIN;
          ce.data.fd = c;
          epoll_ctl(ep, EPOLL_CTL_ADD, c, &ce);
        }
        continue;
      }
      std::string &in = pending[fd];
      ssize_t r;
      while ((r = read(fd, buf, sizeof buf)) > 0) in.append(buf, (size_t)r);
      if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
        close(fd);
        pending.erase(fd);
        continue;
      }
      size_t end;
      std::string out;
      while ((end = in.find("\r\n\r\n")) != std::string::npos) {
        out += answer(in.substr(0, end + 2));
        in.erase(0, end + 4);
      }
      size_t off = 0;
      while (off < out.size()) {
        ssize_t w = write(fd, out.data() + off, out.size() - off);
        if (w <= 0) break; // a slow reader: the benchmark's wrk never is
        off += (size_t)w;
      }
    }
  }
}

} // namespace

int main(int argc, char **argv) {
  int port = 8089, threads = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--port")) port = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: cxx_router [--port P] [--threads N]\n");
      return 2;
    }
  }
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; t++) pool.emplace_back(loop, port);
  loop(port);
}
