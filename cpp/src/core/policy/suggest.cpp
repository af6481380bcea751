// "Did you mean" support for policy errors: every unknown name lists the valid
// choices and the closest one, so a typo costs seconds, not a debugging session.
#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "xpuruntime/error.h"
#include "xpuruntime/policy.h"

namespace xpuruntime {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  // Case-insensitive Levenshtein with one rolling row: "cublaslt" is one step from
  // "cublasLt" in a user's mind, not three.
  auto lower = [](char c) { return static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c); };
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t up = row[j];
      std::size_t cost = lower(a[i - 1]) == lower(b[j - 1]) ? 0 : 1;
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + cost});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string closest_match(std::string_view word, const std::vector<std::string>& choices) {
  std::string best;
  std::size_t best_d = static_cast<std::size_t>(-1);
  for (const auto& c : choices) {
    // A choice is accepted only within max(2, longer/2) edits, and the distance is at
    // least the difference in length, so a word more than twice as long as `c` (and
    // more than 2 longer) can never be accepted as its match: skip the O(|word|*|c|)
    // distance. This keeps a 50 MB op key from costing minutes.
    if (word.size() > std::max(2 * c.size(), c.size() + 2)) continue;
    std::size_t d = edit_distance(word, c);
    if (d < best_d) {  // first of equals wins: choices are sorted, so this is deterministic
      best_d = d;
      best = c;
    }
  }
  if (best_d == static_cast<std::size_t>(-1)) return {};
  // Prefix/suffix typos ("flash" for "flash_v2") are close in intent even when the
  // distance is large relative to the word, so allow up to half the longer length.
  std::size_t limit = std::max<std::size_t>(2, std::max(word.size(), best.size()) / 2);
  return best_d <= limit ? best : std::string();
}

std::string unknown_choice_message(std::string_view what, std::string_view word,
                                   std::string_view where,
                                   const std::vector<std::string>& choices) {
  std::string msg = "unknown ";
  msg += what;
  msg += " ";
  msg += quote_input(word);  // bounded and valid UTF-8 whatever the key held
  if (!where.empty()) {
    msg += " (in ";
    msg += where;
    msg += ")";
  }
  msg += "; valid choices: ";
  if (choices.empty()) {
    msg += "(none)";
  } else {
    for (std::size_t i = 0; i < choices.size(); ++i) {
      if (i) msg += ", ";
      msg += choices[i];
    }
  }
  std::string near = closest_match(word, choices);
  if (!near.empty()) {
    msg += "; did you mean '";
    msg += near;
    msg += "'?";
  }
  return msg;
}

}  // namespace xpuruntime
