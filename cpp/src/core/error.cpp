// Message hygiene for the typed errors (see error.h for why messages need it).
#include "xpuruntime/error.h"

namespace xpuruntime {
namespace {

constexpr char kHex[] = "0123456789abcdef";

void append_hex_escape(std::string& out, unsigned char b) {
  out += "\\x";
  out += kHex[b >> 4];
  out += kHex[b & 0xf];
}

// Length of the well-formed UTF-8 sequence starting at s[i] (1..4), or 0 when the
// byte there starts none. Follows Unicode's table 3-7, as Python's strict decoder
// does: no overlong forms, no surrogates, nothing past U+10FFFF.
std::size_t utf8_sequence_length(std::string_view s, std::size_t i) {
  auto at = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char b0 = at(i);
  if (b0 < 0x80) return 1;
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xbf;  // range of the second byte
  if (b0 >= 0xc2 && b0 <= 0xdf) {
    n = 2;
  } else if (b0 >= 0xe0 && b0 <= 0xef) {
    n = 3;
    if (b0 == 0xe0) lo = 0xa0;  // overlong
    if (b0 == 0xed) hi = 0x9f;  // surrogates
  } else if (b0 >= 0xf0 && b0 <= 0xf4) {
    n = 4;
    if (b0 == 0xf0) lo = 0x90;  // overlong
    if (b0 == 0xf4) hi = 0x8f;  // past U+10FFFF
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  if (at(i + 1) < lo || at(i + 1) > hi) return 0;
  for (std::size_t k = 2; k < n; ++k) {
    if (at(i + k) < 0x80 || at(i + k) > 0xbf) return 0;
  }
  return n;
}

// Moves `pos` back to the start of the UTF-8 sequence it falls in (valid input).
std::size_t sequence_start(std::string_view s, std::size_t pos) {
  while (pos > 0 && pos < s.size() && (static_cast<unsigned char>(s[pos]) & 0xc0) == 0x80) --pos;
  return pos;
}

}  // namespace

std::string to_valid_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    std::size_t n = utf8_sequence_length(text, i);
    // NUL would end the message early wherever it is read as a C string (Python's
    // PyErr_SetString is one), so it is escaped like an invalid byte.
    if (n == 0 || text[i] == '\0') {
      append_hex_escape(out, static_cast<unsigned char>(text[i]));
      ++i;
      continue;
    }
    out.append(text.substr(i, n));
    i += n;
  }
  return out;
}

std::string quote_input(std::string_view value, std::size_t max_bytes) {
  std::string out = "'";
  std::size_t i = 0;
  while (i < value.size() && i < max_bytes) {
    auto b = static_cast<unsigned char>(value[i]);
    std::size_t n = utf8_sequence_length(value, i);
    if (n == 1) {
      switch (b) {
        case '\n':
          out += "\\n";
          break;
        case '\r':
          out += "\\r";
          break;
        case '\t':
          out += "\\t";
          break;
        case '\\':
          out += "\\\\";
          break;
        case '\'':
          out += "\\'";
          break;
        default:
          if (b < 0x20 || b == 0x7f)
            append_hex_escape(out, b);
          else
            out += static_cast<char>(b);
      }
      ++i;
    } else if (n == 0) {
      append_hex_escape(out, b);
      ++i;
    } else {
      out.append(value.substr(i, n));
      i += n;
    }
  }
  out += "'";
  if (i < value.size()) {
    out += "... (";
    out += std::to_string(value.size());
    out += " bytes)";
  }
  return out;
}

namespace detail {

std::string sanitize_message(std::string_view msg) {
  std::string valid = to_valid_utf8(msg);
  if (valid.size() <= kMaxMessageBytes) return valid;
  // Keep the head (what failed) and the tail (the source location and the fix).
  constexpr std::size_t kTail = 1024;
  constexpr std::size_t kHead = kMaxMessageBytes - kTail - 64;
  std::size_t head_end = sequence_start(valid, kHead);
  std::size_t tail_begin = sequence_start(valid, valid.size() - kTail);
  std::string out = valid.substr(0, head_end);
  out += " ... [";
  out += std::to_string(tail_begin - head_end);
  out += " bytes cut] ... ";
  out += valid.substr(tail_begin);
  return out;
}

}  // namespace detail
}  // namespace xpuruntime
