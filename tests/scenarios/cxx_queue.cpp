// SPDX-License-Identifier: MIT
//
// cxx_queue - a C++ job pipeline: a producer thread pushes jobs (each owning a
// payload std::vector<uint8_t> and a std::string tag) into a std::deque; two
// consumer threads pop and process them at a capped rate. The producer's rate
// follows a daily cycle compressed to ~1.5 s, so the queue (and memory) swells
// and drains repeatedly; the consumers reuse a scratch buffer whose capacity
// only grows to the largest job seen.
//
// Ground truth: no leak (control).
//
// Options: --seconds S (default 5), --seed N, --pidfile PATH
#include "scen_common.h"

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Job {
  uint64_t id;
  std::string tag;
  std::vector<uint8_t> payload;
};

class JobQueue {
 public:
  void push(std::unique_ptr<Job> j) {
    {
      std::lock_guard<std::mutex> g(mu_);
      q_.push_back(std::move(j));
    }
    cv_.notify_one();
  }
  std::unique_ptr<Job> pop() {
    std::unique_lock<std::mutex> g(mu_);
    cv_.wait(g, [&] { return !q_.empty() || closed_; });
    if (q_.empty()) return nullptr;
    auto j = std::move(q_.front());
    q_.pop_front();
    return j;
  }
  void close() {
    {
      std::lock_guard<std::mutex> g(mu_);
      closed_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Job>> q_;
  bool closed_ = false;
};

std::atomic<uint64_t> g_done{0}, g_checksum{0};

// Each consumer handles at most ~12k jobs/s (it waits on a downstream service):
// batches of 16 jobs, then a pause, with no credit carried over from idle time.
void consume(JobQueue *q) {
  std::vector<uint8_t> scratch;  // capacity grows to the largest job, then stays
  const double per_job = 1.0 / 12000;
  double next = scen_now();
  unsigned in_batch = 0;
  while (auto job = q->pop()) {
    scratch.assign(job->payload.begin(), job->payload.end());
    uint64_t sum = 0;
    for (size_t i = 0; i < scratch.size(); i += 8) sum += scratch[i];
    g_checksum += sum + job->tag.size();
    g_done++;
    scen_step();
    if (++in_batch == 16) {
      in_batch = 0;
      double now = scen_now();
      next = (next > now ? next : now) + 16 * per_job;
      scen_sleep(next - now);
    }
  }
}

}  // namespace

int main(int argc, char **argv) {
  double seconds = scen_seconds(argc, argv, 5.0);
  uint64_t rng = static_cast<uint64_t>(scen_opt_long(argc, argv, "--seed", "SCEN_SEED", 3));
  scen_write_pidfile(argc, argv);
  scen_step_init();

  JobQueue q;
  std::vector<std::thread> consumers;
  for (int i = 0; i < 2; i++) consumers.emplace_back(consume, &q);

  double start = scen_now(), end = start + seconds, last = start, owed = 0;
  uint64_t produced = 0;
  while (scen_now() < end) {
    double now = scen_now(), t = now - start;
    // 2k..30k jobs/s (mean 16k); the consumers manage ~24k/s together, so the
    // queue swells at the peak of each cycle and drains afterwards
    double rate = 16000.0 + 14000.0 * std::sin(t * 4.2);
    owed += rate * (now - last);
    last = now;
    for (; owed >= 1; owed -= 1) {
      auto job = std::make_unique<Job>();
      job->id = produced++;
      job->tag = "tenant-" + std::to_string(scen_range(&rng, 1, 500)) + "/batch-job";
      job->payload.resize(scen_logsize(&rng, 32, 2048));
      q.push(std::move(job));
    }
    scen_sleep(0.001);
  }
  q.close();
  for (auto &c : consumers) c.join();
  std::printf("cxx_queue: produced=%llu done=%llu checksum=%llu\n",
              static_cast<unsigned long long>(produced),
              static_cast<unsigned long long>(g_done.load()),
              static_cast<unsigned long long>(g_checksum.load()));
  return 0;
}
