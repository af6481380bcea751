// Decision serialization and the bounded, thread-safe decision log.
#include "xpuruntime/decision.h"

#include <nlohmann/json.hpp>

namespace xpuruntime {

std::string Decision::to_json() const {
  nlohmann::json j;
  j["op"] = op;
  j["node"] = node;
  j["device"] = device;
  j["dtypes"] = dtypes;
  j["shapes"] = shapes;
  nlohmann::json cs = nlohmann::json::array();
  for (const auto& c : candidates) {
    cs.push_back({{"kernel", c.kernel},
                  {"verdict", c.verdict},
                  {"reason_code", c.reason_code},
                  {"detail", c.detail},
                  {"time_ms", c.time_ms ? nlohmann::json(*c.time_ms) : nlohmann::json()},
                  {"algorithm", c.algorithm}});
  }
  j["candidates"] = cs;
  j["chosen"] = chosen;
  j["algorithm"] = algorithm;
  j["rule"] = rule;
  j["pin"] = pin ? nlohmann::json{{"kernel", pin->kernel}, {"algorithm", pin->algorithm}}
                 : nlohmann::json();
  j["timings"] = timings.empty() ? nlohmann::json() : nlohmann::json(timings);
  j["detail"] = detail;
  j["key"] = key;
  j["seq"] = seq;
  j["hits"] = hits;
  return j.dump();
}

std::string Decision::summary() const {
  std::string s = op;
  if (!node.empty()) s += "@" + node;
  s += " " + device + " -> " + (chosen.empty() ? std::string("<nothing>") : chosen);
  if (!algorithm.empty()) s += "[" + algorithm + "]";
  s += " (" + rule + ")";
  return s;
}

uint64_t DecisionLog::append(Decision d) {
  std::lock_guard lock(mu_);
  d.seq = next_seq_++;
  uint64_t seq = d.seq;
  ring_.push_back(std::move(d));
  while (ring_.size() > capacity_) ring_.pop_front();
  return seq;
}

bool DecisionLog::add_hits(uint64_t seq, uint64_t n) {
  std::lock_guard lock(mu_);
  // Sequence numbers in the ring are consecutive, so the position is arithmetic.
  if (ring_.empty() || seq < ring_.front().seq || seq > ring_.back().seq) return false;
  ring_[static_cast<std::size_t>(seq - ring_.front().seq)].hits += n;
  return true;
}

std::vector<Decision> DecisionLog::snapshot(std::size_t last) const {
  std::lock_guard lock(mu_);
  std::size_t n = ring_.size();
  std::size_t start = (last == 0 || last >= n) ? 0 : n - last;
  return {ring_.begin() + static_cast<std::ptrdiff_t>(start), ring_.end()};
}

std::size_t DecisionLog::size() const {
  std::lock_guard lock(mu_);
  return ring_.size();
}

std::size_t DecisionLog::capacity() const {
  std::lock_guard lock(mu_);
  return capacity_;
}

void DecisionLog::set_capacity(std::size_t capacity) {
  std::lock_guard lock(mu_);
  capacity_ = capacity == 0 ? 1 : capacity;
  while (ring_.size() > capacity_) ring_.pop_front();
}

void DecisionLog::clear() {
  std::lock_guard lock(mu_);
  ring_.clear();
}

uint64_t DecisionLog::total_recorded() const {
  std::lock_guard lock(mu_);
  return next_seq_ - 1;
}

}  // namespace xpuruntime
