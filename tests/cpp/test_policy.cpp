// KernelPolicy / ExecutionPolicy: JSON round trips, canonical form and fingerprint,
// SHA-256 against the FIPS 180-4 vectors, and validation errors with suggestions.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "xpuruntime/error.h"
#include "xpuruntime/kernel_registry.h"
#include "xpuruntime/policy.h"

using namespace xpuruntime;

namespace {

// Runs fn, expects PolicyError, returns its message.
template <typename F>
std::string policy_error(F&& fn) {
  try {
    fn();
  } catch (const PolicyError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected PolicyError";
  return "";
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

KernelPolicy sample_policy() {
  KernelPolicy p;
  p.set("matmul", "cublasLt");
  p.set("attention", std::vector<std::string>{"flash_v2", "cudnn", "auto"});
  p.mode = KernelPolicy::Mode::Require;
  p.auto_strategy = KernelPolicy::AutoSelectStrategy::BestPerformance;
  p.pins["matmul|cuda:sm90|float16[16,64],float16[64,32]->float16[16,32]|"] = {"cublasLt",
                                                                              "algo:42"};
  return p;
}

}  // namespace

TEST(Sha256, FipsVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Suggest, EditDistanceAndClosest) {
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("cublaslt", "cublasLt"), 0u);  // case-insensitive
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(closest_match("cublasLT", {"cublas", "cublasLt", "torch"}), "cublasLt");
  EXPECT_EQ(closest_match("flash", {"cudnn", "flash_v2", "math"}), "flash_v2");
  EXPECT_EQ(closest_match("zzzzzzzz", {"cudnn", "flash_v2", "math"}), "");
  std::string m = unknown_choice_message("kernel", "cublasLT", "preferences", {"cublas", "cublasLt"});
  EXPECT_TRUE(contains(m, "valid choices: cublas, cublasLt")) << m;
  EXPECT_TRUE(contains(m, "did you mean 'cublasLt'?")) << m;
}

TEST(KernelPolicy, JsonRoundTripAndEquality) {
  KernelPolicy p = sample_policy();
  KernelPolicy q = KernelPolicy::from_json(p.to_json());
  EXPECT_EQ(p, q);
  EXPECT_EQ(q.get("attention"), (std::vector<std::string>{"flash_v2", "cudnn", "auto"}));
  EXPECT_EQ(q.pins.begin()->second.algorithm, "algo:42");
  EXPECT_EQ(p.canonical_json(), q.canonical_json());
  EXPECT_EQ(p.fingerprint(), q.fingerprint());
  // Canonical form: sorted keys, no whitespace, one name written as a string.
  EXPECT_EQ(KernelPolicy{}.set("matmul", "cublas").canonical_json(),
            R"({"auto_strategy":"first_supported","kind":"kernel_policy","mode":"prefer",)"
            R"("pins":{},"preferences":{"matmul":"cublas"},"schema_version":1})");
  KernelPolicy r = p;
  r.set("matmul", "cublas");
  EXPECT_NE(p, r);
  EXPECT_NE(p.fingerprint(), r.fingerprint());
  EXPECT_EQ(p.fingerprint().size(), 64u);
}

TEST(KernelPolicy, FingerprintIndependentOfInsertionOrder) {
  KernelPolicy a, b;
  a.set("matmul", "cublasLt").set("conv", "cudnn");
  b.set("conv", "cudnn").set("matmul", "cublasLt");
  EXPECT_EQ(a.fingerprint(), b.fingerprint());
  // Whitespace and key order of the input file do not matter either.
  KernelPolicy c = KernelPolicy::from_json(
      "{ \"preferences\" : {\"matmul\": [\"cublasLt\"], \"conv\": \"cudnn\"} }");
  EXPECT_EQ(a.fingerprint(), c.fingerprint());
}

TEST(KernelPolicy, SetGetRemoveRepr) {
  KernelPolicy p;
  p.set("matmul", "cublasLt").set("attention", std::vector<std::string>{"flash_v2", "cudnn"});
  EXPECT_EQ(p.get("matmul"), std::vector<std::string>{"cublasLt"});
  EXPECT_TRUE(p.get("conv").empty());
  EXPECT_EQ(p.repr(), "KernelPolicy(attention=['flash_v2', 'cudnn'], matmul='cublasLt')");
  p.remove("attention");
  p.mode = KernelPolicy::Mode::Require;
  EXPECT_EQ(p.repr(), "KernelPolicy(matmul='cublasLt', mode='require')");
  EXPECT_THROW(p.set("matmul", std::vector<std::string>{}), PolicyError);
}

TEST(KernelPolicy, ReadsSeedFormat) {
  // Seed 004 §6.3 saved {"preferences": ..., "auto_strategy": str(enum)} without a version.
  KernelPolicy p = KernelPolicy::from_json(
      R"({"preferences": {"matmul": "cublasLt"}, "auto_strategy": "AutoSelectStrategy.BestPerformance"})");
  EXPECT_EQ(p.auto_strategy, KernelPolicy::AutoSelectStrategy::BestPerformance);
  EXPECT_EQ(p.schema_version, 1);
}

TEST(KernelPolicy, ParseErrors) {
  std::string m = policy_error([] { KernelPolicy::from_json(R"({"prefrences": {}})"); });
  EXPECT_TRUE(contains(m, "unknown field 'prefrences'")) << m;
  EXPECT_TRUE(contains(m, "did you mean 'preferences'?")) << m;

  m = policy_error([] { KernelPolicy::from_json(R"({"schema_version": 7})"); });
  EXPECT_TRUE(contains(m, "newer")) << m;
  EXPECT_TRUE(contains(m, "schema_version 7")) << m;
  EXPECT_TRUE(contains(m, "upgrade xpuruntime")) << m;

  m = policy_error([] { KernelPolicy::from_json(R"({"mode": "requre"})"); });
  EXPECT_TRUE(contains(m, "did you mean 'require'?")) << m;
  m = policy_error([] { KernelPolicy::from_json(R"({"auto_strategy": "fastest"})"); });
  EXPECT_TRUE(contains(m, "best_performance")) << m;
  m = policy_error([] { KernelPolicy::from_json(R"({"preferences": {"matmul": 3}})"); });
  EXPECT_TRUE(contains(m, "op 'matmul'")) << m;
  m = policy_error([] { KernelPolicy::from_json(R"({"preferences": {"matmul": []}})"); });
  EXPECT_TRUE(contains(m, "empty list")) << m;
  m = policy_error([] { KernelPolicy::from_json("{not json"); });
  EXPECT_TRUE(contains(m, "cannot parse")) << m;
  m = policy_error([] { KernelPolicy::from_json("[1, 2]"); });
  EXPECT_TRUE(contains(m, "must be an object")) << m;
  m = policy_error([] { KernelPolicy::from_json(R"({"kind": "execution_policy"})"); });
  EXPECT_TRUE(contains(m, "not a KernelPolicy")) << m;
  m = policy_error([] { KernelPolicy::from_json(R"({"pins": {"matmul|cpu||": {"kernal": "x"}}})"); });
  EXPECT_TRUE(contains(m, "did you mean 'kernel'?")) << m;
}

TEST(KernelPolicy, ValidateAgainstRegistry) {
  KernelRegistry reg;  // knows the declared names only
  KernelPolicy ok;
  ok.set("matmul", "cublasLt").set("attention", "flash_v2").set("relu", "auto");
  EXPECT_NO_THROW(ok.validate(reg));

  std::string m = policy_error([&] { KernelPolicy{}.set("matmull", "cublas").validate(reg); });
  EXPECT_TRUE(contains(m, "unknown op key 'matmull'")) << m;
  EXPECT_TRUE(contains(m, "did you mean 'matmul'?")) << m;
  EXPECT_TRUE(contains(m, "attention, conv, layernorm, matmul, softmax")) << m;

  m = policy_error([&] { KernelPolicy{}.set("gemm", "cublas").validate(reg); });
  EXPECT_TRUE(contains(m, "use 'matmul'")) << m;
  m = policy_error([&] { KernelPolicy{}.set("MatMul", "cublas").validate(reg); });
  EXPECT_TRUE(contains(m, "use 'matmul'")) << m;

  m = policy_error([&] { KernelPolicy{}.set("matmul", "cublasLT2").validate(reg); });
  EXPECT_TRUE(contains(m, "unknown kernel 'cublasLT2'")) << m;
  EXPECT_TRUE(contains(m, "auto, cpu_blas, cpu_blocked, cublas, cublasLt, onednn, skinny, torch")) << m;
  EXPECT_TRUE(contains(m, "did you mean 'cublasLt'?")) << m;

  m = policy_error([&] {
    KernelPolicy{}.set("matmul", std::vector<std::string>{"auto", "cublas"}).validate(reg);
  });
  EXPECT_TRUE(contains(m, "must be the last")) << m;
  m = policy_error([&] {
    KernelPolicy{}.set("matmul", std::vector<std::string>{"cublas", "cublas"}).validate(reg);
  });
  EXPECT_TRUE(contains(m, "twice")) << m;

  KernelPolicy pinned;
  pinned.pins["matmul|cpu|float32[2,2],float32[2,2]->float32[2,2]|"] = {"cpu_blas", ""};
  EXPECT_NO_THROW(pinned.validate(reg));
  pinned.pins["matmul|cpu|x|"] = {"nope", ""};
  m = policy_error([&] { pinned.validate(reg); });
  EXPECT_TRUE(contains(m, "unknown kernel 'nope'")) << m;

  // Another subsystem declares its routing target; then the name is valid.
  m = policy_error([&] { KernelPolicy{}.set("softmax", "triton").validate(reg); });
  EXPECT_TRUE(contains(m, "register_known_kernel_name")) << m;
  reg.register_known_kernel_name("softmax", "triton");
  EXPECT_NO_THROW(KernelPolicy{}.set("softmax", "triton").validate(reg));
}

TEST(ExecutionPolicy, JsonRoundTripAndFingerprint) {
  ExecutionPolicy p;
  p.target = ExecutionPolicy::Target::NPU;
  p.precision = ExecutionPolicy::Precision::INT8;
  p.static_shape = true;
  p.allow_fallback = ExecutionPolicy::Target::CPU;
  p.workspace_limit_bytes = 1 << 20;
  p.engine = "openvino";
  p.threads = 4;
  p.strict = {"pinned_only"};
  ExecutionPolicy q = ExecutionPolicy::from_json(p.to_json());
  EXPECT_EQ(p, q);
  EXPECT_EQ(p.fingerprint(), q.fingerprint());
  EXPECT_EQ(ExecutionPolicy{}.canonical_json(),
            R"({"allow_fallback":null,"allow_tf32":false,"cuda_graph":false,"deterministic":false,)"
            R"("engine":null,"kind":"execution_policy","precision":"fp32","schema_version":1,)"
            R"("static_shape":false,"strict":[],"target":"auto","threads":0,)"
            R"("workspace_limit_bytes":0})");
  EXPECT_EQ(p.repr(),
            "ExecutionPolicy(target='npu', precision='int8', static_shape=True, "
            "allow_fallback='cpu', workspace_limit_bytes=1048576, engine='openvino', threads=4, "
            "strict=['pinned_only'])");
  // Aliases parse to the canonical value.
  EXPECT_EQ(ExecutionPolicy::from_json(R"({"precision": "float16", "target": "gpu"})").precision,
            ExecutionPolicy::Precision::FP16);
}

TEST(ExecutionPolicy, Errors) {
  std::string m = policy_error([] { ExecutionPolicy::from_json(R"({"precison": "int8"})"); });
  EXPECT_TRUE(contains(m, "did you mean 'precision'?")) << m;
  m = policy_error([] { ExecutionPolicy::from_json(R"({"precision": "int4"})"); });
  EXPECT_TRUE(contains(m, "valid choices: bf16, fp16, fp32, int8")) << m;
  m = policy_error([] { ExecutionPolicy::from_json(R"({"target": "nпu"})"); });
  EXPECT_TRUE(contains(m, "unknown target")) << m;
  m = policy_error([] { ExecutionPolicy::from_json(R"({"strict": ["no_fallbak"]})"); });
  EXPECT_TRUE(contains(m, "did you mean 'no_fallback'?")) << m;
  m = policy_error(
      [] { ExecutionPolicy::from_json(R"({"strict": ["no_fallback"], "allow_fallback": "cpu"})"); });
  EXPECT_TRUE(contains(m, "drop one")) << m;
  m = policy_error([] { ExecutionPolicy::from_json(R"({"target": "cpu", "allow_fallback": "cpu"})"); });
  EXPECT_TRUE(contains(m, "equals the target")) << m;
  m = policy_error([] { ExecutionPolicy::from_json(R"({"threads": -1})"); });
  EXPECT_TRUE(contains(m, "threads")) << m;
  m = policy_error([] { ExecutionPolicy::from_json(R"({"static_shape": "yes"})"); });
  EXPECT_TRUE(contains(m, "true or false")) << m;
  m = policy_error([] { ExecutionPolicy::from_json(R"({"schema_version": 2})"); });
  EXPECT_TRUE(contains(m, "newer")) << m;
}

TEST(ExecutionPolicy, OrchestratorFieldsRoundTripAndStayOutOfOldFingerprints) {
  ExecutionPolicy p;
  p.engines = {"native", "onnxruntime"};
  p.pins = {{"Einsum", "onnxruntime@cpu"}, {"fc1", "native"}};
  p.max_islands = 2;
  p.max_fallback_nodes = 0;
  p.max_copy_bytes = 1 << 20;
  p.forbid = {"cpu"};
  ExecutionPolicy q = ExecutionPolicy::from_json(p.to_json());
  EXPECT_EQ(p, q);
  EXPECT_EQ(p.fingerprint(), q.fingerprint());
  EXPECT_NE(p.fingerprint(), ExecutionPolicy{}.fingerprint());
  EXPECT_TRUE(contains(p.canonical_json(), R"("engines":["native","onnxruntime"])")) << p.canonical_json();
  EXPECT_TRUE(contains(p.repr(), "max_islands=2, max_fallback_nodes=0, max_copy_bytes=1048576, forbid=['cpu']"))
      << p.repr();
  // Unset: not written, so a policy without them keeps the fingerprint it had before.
  EXPECT_FALSE(contains(ExecutionPolicy{}.canonical_json(), "engines"));
  EXPECT_FALSE(contains(ExecutionPolicy{}.canonical_json(), "max_islands"));
  std::string m = policy_error([] { ExecutionPolicy::from_json(R"({"max_islands": 0})"); });
  EXPECT_TRUE(contains(m, "max_islands")) << m;
  m = policy_error([] { ExecutionPolicy::from_json(R"({"engines": ["native", "native"]})"); });
  EXPECT_TRUE(contains(m, "twice")) << m;
  m = policy_error([] { ExecutionPolicy::from_json(R"({"pins": {"MatMul": "ort@"}})"); });
  EXPECT_TRUE(contains(m, "engine@device")) << m;
  m = policy_error([] { ExecutionPolicy::from_json(R"({"forbid": "cpu"})"); });
  EXPECT_TRUE(contains(m, "list of names")) << m;
  m = policy_error([] { ExecutionPolicy::from_json(R"({"max_copy_bytes": -1})"); });
  EXPECT_TRUE(contains(m, "max_copy_bytes")) << m;
}

// ---- hardening (issue 19): messages, integer ranges, hostile keys ----------------

namespace {

// A strict UTF-8 check (what Python's decoder accepts), written apart from the
// library's own so that a bug there cannot hide here.
bool is_valid_utf8(const std::string& s) {
  std::size_t i = 0;
  auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  while (i < s.size()) {
    unsigned char c = byte(i);
    unsigned cp = 0;
    std::size_t n = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      n = 2, cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      n = 3, cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      n = 4, cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n > s.size()) return false;
    for (std::size_t k = 1; k < n; ++k) {
      if ((byte(i + k) & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (byte(i + k) & 0x3f);
    }
    const unsigned min_cp[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += n;
  }
  return true;
}

}  // namespace

TEST(Messages, ToValidUtf8EscapesExactlyTheInvalidBytes) {
  EXPECT_EQ(to_valid_utf8("plain"), "plain");
  EXPECT_EQ(to_valid_utf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"),
            "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");  // é € 😀 kept
  EXPECT_EQ(to_valid_utf8("a\xff" "b"), "a\\xffb");
  EXPECT_EQ(to_valid_utf8("\xc0\xaf"), "\\xc0\\xaf");          // overlong '/'
  EXPECT_EQ(to_valid_utf8("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // a surrogate
  EXPECT_EQ(to_valid_utf8("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // past U+10FFFF
  EXPECT_EQ(to_valid_utf8("\xe2\x82"), "\\xe2\\x82");          // truncated sequence
  EXPECT_EQ(to_valid_utf8(std::string("a\0b", 3)), "a\\x00b");  // NUL would cut the message
  EXPECT_EQ(to_valid_utf8(to_valid_utf8("x\xfe")), to_valid_utf8("x\xfe"));  // idempotent
}

TEST(Messages, RandomBytesAlwaysGiveValidUtf8) {
  // Every error constructor runs its message through the same repair.
  std::uint32_t state = 12345;
  for (int round = 0; round < 2000; ++round) {
    std::string raw;
    std::size_t n = (state = state * 1664525u + 1013904223u) % 64;
    for (std::size_t i = 0; i < n; ++i) {
      state = state * 1664525u + 1013904223u;
      raw += static_cast<char>(state >> 24);
    }
    PolicyError e(raw);
    ASSERT_TRUE(is_valid_utf8(e.what())) << round;
    ASSERT_TRUE(is_valid_utf8(quote_input(raw))) << round;
  }
}

TEST(Messages, QuoteInputIsBoundedAndEscapesControls) {
  EXPECT_EQ(quote_input("matmul"), "'matmul'");
  EXPECT_EQ(quote_input("a\nb\t'\\"), "'a\\nb\\t\\'\\\\'");
  std::string big(50u << 20, 'x');
  std::string q = quote_input(big);
  EXPECT_LT(q.size(), 300u);
  EXPECT_TRUE(contains(q, "(52428800 bytes)")) << q;
  // A cut never splits a multi-byte character.
  std::string euros;
  for (int i = 0; i < 200; ++i) euros += "\xe2\x82\xac";
  EXPECT_TRUE(is_valid_utf8(quote_input(euros, 10)));
}

TEST(Messages, ErrorMessagesAreCappedAndKeepTheirTail) {
  std::string msg(1u << 20, 'm');
  msg += " [cpp/src/core/x.cpp:1]";
  InvalidArgumentError e(msg);
  std::string what = e.what();
  EXPECT_LE(what.size(), kMaxMessageBytes);
  EXPECT_TRUE(contains(what, "bytes cut")) << what.substr(0, 100);
  EXPECT_TRUE(contains(what, "[cpp/src/core/x.cpp:1]"));
}

TEST(Messages, SourceLocationIsRelativeToTheRepository) {
  std::string m = policy_error([] { KernelPolicy::from_json("[]"); });
  EXPECT_TRUE(contains(m, "[cpp/src/core/policy/policy_json.cpp:")) << m;
  EXPECT_FALSE(contains(m, "../")) << m;
  EXPECT_FALSE(contains(m, "/work/")) << m;
  static_assert(std::string_view(detail::source_path("/home/u/repo/cpp/src/core/a.cpp")) ==
                "cpp/src/core/a.cpp");
  static_assert(std::string_view(detail::source_path("../../tests/cpp/t.cpp")) ==
                "tests/cpp/t.cpp");
  static_assert(std::string_view(detail::source_path("/src/cppx/cpp/include/h.h")) ==
                "cpp/include/h.h");
}

TEST(PolicyHardening, DeeplyNestedJsonGivesATypedErrorNotAStackOverflow) {
  // nlohmann parses this iteratively; quoting it in the message must not recurse.
  const std::size_t depth = 200000;
  std::string nested = std::string(depth, '[') + std::string(depth, ']');
  for (const std::string& doc :
       {R"({"preferences": {"matmul": )" + nested + "}}", R"({"mode": )" + nested + "}",
        R"({"preferences": )" + nested + "}", R"({"pins": {"matmul|x": )" + nested + "}}"}) {
    std::string m = policy_error([&] { KernelPolicy::from_json(doc); });
    EXPECT_LT(m.size(), 1000u) << m.substr(0, 200);
  }
  std::string m =
      policy_error([&] { ExecutionPolicy::from_json(R"({"strict": )" + nested + "}"); });
  EXPECT_LT(m.size(), 1000u);
}

TEST(PolicyHardening, IntegersAreRangeCheckedNotTruncated) {
  // 2**32+1 read as an int is 1: a file from the future must not load as version 1.
  std::string m =
      policy_error([] { KernelPolicy::from_json(R"({"schema_version": 4294967297})"); });
  EXPECT_TRUE(contains(m, "schema_version 4294967297")) << m;
  m = policy_error([] { ExecutionPolicy::from_json(R"({"schema_version": 4294967297})"); });
  EXPECT_TRUE(contains(m, "4294967297")) << m;
  m = policy_error(
      [] { KernelPolicy::from_json(R"({"schema_version": 18446744073709551615})"); });
  EXPECT_TRUE(contains(m, "schema_version")) << m;
  m = policy_error([] { KernelPolicy::from_json(R"({"schema_version": -4294967295})"); });
  EXPECT_TRUE(contains(m, "invalid schema_version")) << m;
  m = policy_error([] { ExecutionPolicy::from_json(R"({"threads": 4294967297})"); });
  EXPECT_TRUE(contains(m, "'threads'") && contains(m, "2147483647")) << m;
  m = policy_error([] { ExecutionPolicy::from_json(R"({"threads": -1})"); });
  EXPECT_TRUE(contains(m, "'threads'")) << m;
  m = policy_error(
      [] { ExecutionPolicy::from_json(R"({"workspace_limit_bytes": 9223372036854775808})"); });
  EXPECT_TRUE(contains(m, "workspace_limit_bytes")) << m;
  EXPECT_EQ(ExecutionPolicy::from_json(R"({"workspace_limit_bytes": 9223372036854775807})")
                .workspace_limit_bytes,
            9223372036854775807ull);
  EXPECT_EQ(ExecutionPolicy::from_json(R"({"threads": 2147483647})").threads, 2147483647);
}

TEST(PolicyHardening, HugeUnknownKeyIsFastAndItsEchoBounded) {
  std::string big(50u << 20, 'q');
  auto start = std::chrono::steady_clock::now();
  KernelPolicy p;
  p.preferences[big] = {"auto"};
  std::string m = policy_error([&] { p.validate(KernelRegistry::instance()); });
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(m.size(), 4000u);
  EXPECT_TRUE(contains(m, "(52428800 bytes)")) << m.substr(0, 300);
  EXPECT_LT(seconds, 10.0);  // minutes before the bound; well under a second after
  // Suggestions for ordinary typos are unchanged.
  EXPECT_EQ(closest_match("matmull", {"conv", "matmul"}), "matmul");
  EXPECT_EQ(closest_match(big, {"conv", "matmul"}), "");
}

TEST(PolicyHardening, InvalidUtf8InAFieldGivesAValidMessage) {
  // nlohmann refuses the string and quotes the bytes it read; the message stays UTF-8.
  std::string m = policy_error([] { KernelPolicy::from_json("{\"mode\": \"\xff\xfe\"}"); });
  EXPECT_TRUE(is_valid_utf8(m)) << m;
  m = policy_error([] { KernelPolicy::from_json("{\"\xc3\x28\": 1}"); });
  EXPECT_TRUE(is_valid_utf8(m)) << m;
  KernelPolicy p;
  p.preferences["ma\xfftmul"] = {"auto"};  // C++ callers may hand over any bytes
  m = policy_error([&] { p.validate(KernelRegistry::instance()); });
  EXPECT_TRUE(is_valid_utf8(m)) << m;
  EXPECT_TRUE(contains(m, "'ma\\xfftmul'")) << m;
}

TEST(PolicyHardening, NumbersPastDoubleRangeAreAPolicyError) {
  // Found by fuzz/policy_json_fuzzer.cpp: nlohmann throws out_of_range (not a
  // parse_error) for 1.5e320, which escaped as an untyped exception.
  std::string m = policy_error([] { ExecutionPolicy::from_json(R"({"threads": 1.5e320})"); });
  EXPECT_TRUE(contains(m, "1.5e320")) << m;
  policy_error([] { KernelPolicy::from_json(R"({"pins": {"a|b": -1e999}})"); });
}

TEST(PolicyHardening, StrictAssertionsReadFromJsonAreASortedSet) {
  // Found by the fuzzer's round trip: to_json writes the set sorted, so a policy
  // read with another order or a duplicate did not equal the one read back.
  ExecutionPolicy p = ExecutionPolicy::from_json(
      R"({"strict": ["pinned_only", "no_cpu_fallback", "pinned_only"]})");
  EXPECT_EQ(p.strict, (std::vector<std::string>{"no_cpu_fallback", "pinned_only"}));
  EXPECT_EQ(ExecutionPolicy::from_json(p.to_json(2)), p);
}
