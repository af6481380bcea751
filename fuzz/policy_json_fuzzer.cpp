// libFuzzer target: the policy JSON parser (KernelPolicy / ExecutionPolicy
// from_json), validation against the kernel registry, and the message helpers
// (issue 19). The contract under test: any bytes give a policy or a typed
// PolicyError whose message is valid UTF-8 and bounded, never a crash, a sanitizer
// report (stack overflow from a recursive dump, a wrapped integer) or another
// exception type; a policy that loads survives to_json -> from_json unchanged.
//
// The first byte picks the target, the rest is the JSON text. Seeds:
// fuzz/corpus/policy_json/ (a selector byte followed by a policy file).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "xpuruntime/error.h"
#include "xpuruntime/kernel_registry.h"
#include "xpuruntime/policy.h"

using namespace xpuruntime;

namespace {

// Strict UTF-8 (what Python's decoder accepts), kept apart from the library's own
// so a bug there cannot hide here.
bool is_valid_utf8(std::string_view s) {
  std::size_t i = 0;
  auto at = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  while (i < s.size()) {
    unsigned char c = at(i);
    std::size_t n = c < 0x80             ? 1
                    : (c & 0xe0) == 0xc0 ? 2
                    : (c & 0xf0) == 0xe0 ? 3
                    : (c & 0xf8) == 0xf0 ? 4
                                         : 0;
    if (n == 0 || i + n > s.size()) return false;
    unsigned cp = n == 1 ? c : c & (0x7f >> n);
    for (std::size_t k = 1; k < n; ++k) {
      if ((at(i + k) & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (at(i + k) & 0x3f);
    }
    const unsigned min_cp[] = {0, 0, 0x80, 0x800, 0x10000};
    if (n > 1 && (cp < min_cp[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))) return false;
    i += n;
  }
  return true;
}

[[noreturn]] void fail(const char* what, std::string_view detail) {
  std::fprintf(stderr, "policy_json_fuzzer: %s: %.300s\n", what, std::string(detail).c_str());
  __builtin_trap();
}

void check_message(const XpuRuntimeError& e) {
  std::string_view m = e.what();
  if (!is_valid_utf8(m)) fail("message is not valid UTF-8", m);
  if (m.size() > kMaxMessageBytes) fail("message is not bounded", m);
  if (m.find('\0') != std::string_view::npos) fail("message holds NUL", m);
}

template <typename Policy>
void round_trip(const Policy& p) {
  Policy again = Policy::from_json(p.to_json(2));
  if (!(again == p)) fail("to_json -> from_json changed the policy", p.to_json(-1));
  if (again.fingerprint() != p.fingerprint()) fail("fingerprint changed", p.to_json(-1));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  // The quoting helpers take any bytes.
  std::string q = quote_input(text);
  if (!is_valid_utf8(q) || q.size() > 4 * kMaxQuotedBytes + 64) fail("quote_input", q);
  if (!is_valid_utf8(to_valid_utf8(text))) fail("to_valid_utf8", text);
  try {
    if (data[0] & 1) {
      ExecutionPolicy p = ExecutionPolicy::from_json(text);  // validates
      round_trip(p);
    } else {
      KernelPolicy p = KernelPolicy::from_json(text);
      round_trip(p);
      p.validate(KernelRegistry::instance());
      (void)p.repr();
    }
  } catch (const PolicyError& e) {
    check_message(e);  // the typed refusal a bad policy must give
  } catch (const XpuRuntimeError& e) {
    check_message(e);
    fail("a policy error of the wrong type", e.what());
  }
  return 0;
}
