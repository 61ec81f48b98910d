// SPDX-License-Identifier: MIT
//
// startup_tables - a text-classification service: at startup it "loads" a large
// vocabulary (hash map of strings), a dense embedding table and a routing trie,
// gradually (as if read from disk); all of it is kept for the life of the
// process. Then it serves requests in a steady loop that only uses temporaries.
//
// Ground truth: no leak (control). The big startup growth must not be reported.
//
// Options: --seconds S (default 5, includes loading), --words N (default 150000),
//          --rate REQ_PER_S (default 5000), --seed N, --pidfile PATH
#include "scen_common.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

struct TrieNode {
  std::array<std::unique_ptr<TrieNode>, 16> child;
  uint32_t route = 0;
};

class Model {
 public:
  void load(size_t words, uint64_t *rng) {
    const size_t dim = 64;
    embeddings_.reserve(words * dim);
    vocab_.reserve(words);
    // Load in chunks, pausing between them like a reader waiting on I/O.
    const size_t chunk = 5000;
    for (size_t base = 0; base < words; base += chunk) {
      for (size_t i = base; i < std::min(words, base + chunk); i++) {
        std::string w = make_word(i, rng);
        vocab_.emplace(w, static_cast<uint32_t>(i));
        for (size_t d = 0; d < dim; d++)
          embeddings_.push_back(static_cast<float>(scen_unit(rng) - 0.5));
        if (i % 4 == 0) insert_route(w, static_cast<uint32_t>(i));
      }
      scen_sleep(0.02);
    }
    norms_.assign(words, 1.0f);
  }

  uint32_t classify(const std::vector<std::string> &tokens) const {
    std::vector<float> acc(64, 0.0f);
    for (const auto &t : tokens) {
      auto it = vocab_.find(t);
      if (it == vocab_.end()) continue;
      const float *e = &embeddings_[it->second * 64];
      for (size_t d = 0; d < 64; d++) acc[d] += e[d] * norms_[it->second];
    }
    return static_cast<uint32_t>(std::max_element(acc.begin(), acc.end()) - acc.begin()) +
           lookup_route(tokens.empty() ? std::string() : tokens[0]);
  }

  size_t vocab_size() const { return vocab_.size(); }

 private:
  static std::string make_word(size_t i, uint64_t *rng) {
    std::string w = "w" + std::to_string(i) + "_";
    size_t extra = scen_range(rng, 0, 24);
    for (size_t k = 0; k < extra; k++) w.push_back(static_cast<char>('a' + scen_range(rng, 0, 25)));
    return w;
  }

  void insert_route(const std::string &w, uint32_t route) {
    TrieNode *n = &root_;
    for (size_t k = 0; k < w.size() && k < 6; k++) {
      auto &c = n->child[static_cast<unsigned char>(w[k]) & 15];
      if (!c) c = std::make_unique<TrieNode>();
      n = c.get();
    }
    n->route = route;
  }

  uint32_t lookup_route(const std::string &w) const {
    const TrieNode *n = &root_;
    for (size_t k = 0; k < w.size() && k < 6; k++) {
      const auto &c = n->child[static_cast<unsigned char>(w[k]) & 15];
      if (!c) break;
      n = c.get();
    }
    return n->route;
  }

  std::unordered_map<std::string, uint32_t> vocab_;
  std::vector<float> embeddings_;
  std::vector<float> norms_;
  TrieNode root_;
};

std::vector<std::string> tokenize(const std::string &text) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); i++) {
    if (i == text.size() || text[i] == ' ') {
      if (i > start) out.emplace_back(text.substr(start, i - start));
      start = i + 1;
    }
  }
  return out;
}

}  // namespace

int main(int argc, char **argv) {
  double seconds = scen_seconds(argc, argv, 5.0);
  size_t words = static_cast<size_t>(scen_opt_long(argc, argv, "--words", nullptr, 150000));
  double rate = scen_opt_double(argc, argv, "--rate", "SCEN_RATE", 5000);
  uint64_t rng = static_cast<uint64_t>(scen_opt_long(argc, argv, "--seed", "SCEN_SEED", 5));
  scen_write_pidfile(argc, argv);
  scen_step_init();

  double end = scen_now() + seconds;
  auto model = std::make_unique<Model>();
  model->load(words, &rng);

  scen_pacer pacer;
  scen_pacer_init(&pacer, rate);
  uint64_t checksum = 0, served = 0;
  while (scen_now() < end) {
    std::string text;
    size_t ntok = scen_range(&rng, 3, 40);
    for (size_t k = 0; k < ntok; k++) {
      text += "w" + std::to_string(scen_range(&rng, 0, words + words / 5)) + "_";
      text += ' ';
    }
    std::vector<std::string> tokens = tokenize(text);
    checksum += model->classify(tokens);
    served++;
    scen_step();
    scen_pace(&pacer);
  }
  std::printf("startup_tables: vocab=%zu served=%llu checksum=%llu\n", model->vocab_size(),
              static_cast<unsigned long long>(served), static_cast<unsigned long long>(checksum));
  return 0;
}
