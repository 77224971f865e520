#include "tokenizer/regex_split.h"

#include <pcre2.h>

#include "core/error.h"

namespace nvllm {
namespace {

pcre2_code* as_code(void* p) { return static_cast<pcre2_code*>(p); }

// Match data and a JIT stack per thread: creating them per call would cost more than the
// matching for short texts. One JIT stack of 1 MiB covers long runs of whitespace that the
// look-ahead alternatives backtrack over.
struct ThreadMatchState {
  pcre2_match_data* data = nullptr;
  pcre2_jit_stack* stack = nullptr;
  pcre2_match_context* context = nullptr;
  ThreadMatchState() {
    data = pcre2_match_data_create(4, nullptr);
    stack = pcre2_jit_stack_create(32 * 1024, 1024 * 1024, nullptr);
    context = pcre2_match_context_create(nullptr);
    pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~ThreadMatchState() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
    pcre2_match_data_free(data);
  }
};
thread_local ThreadMatchState t_state;

}  // namespace

RegexSplitter::RegexSplitter(const std::string& pattern, const std::string& where) : where_(where) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    fail(where, ": the regex does not compile with PCRE2 at offset ", offset, ": ", reinterpret_cast<char*>(message));
  }
  code_ = code;
  // Without JIT (e.g. a PCRE2 built without it) the interpreter gives the same matches, slower.
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
}

RegexSplitter::~RegexSplitter() { pcre2_code_free(as_code(code_)); }

void RegexSplitter::split(std::string_view text, size_t begin, size_t end,
                          std::vector<std::pair<size_t, size_t>>& pieces) const {
  // The subject is the piece alone, so anchors and look-arounds cannot see past its ends (the
  // reference matches each piece as its own string).
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data() + begin);
  const size_t length = end - begin;
  size_t pos = 0;
  size_t emitted = 0;  // end of the last piece appended
  while (pos < length) {
    int rc;
    if (jit_) {
      rc = pcre2_jit_match(as_code(code_), subject, length, pos, PCRE2_NO_UTF_CHECK, t_state.data, t_state.context);
    } else {
      rc = pcre2_match(as_code(code_), subject, length, pos, PCRE2_NO_UTF_CHECK, t_state.data, nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    NVLLM_CHECK(rc >= 0, where_, ": regex matching failed (PCRE2 error ", rc, ") on a text of ", end - begin, " bytes");
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(t_state.data);
    const size_t ms = ov[0], me = ov[1];
    if (ms > emitted) pieces.emplace_back(begin + emitted, begin + ms);
    if (me > ms) {
      pieces.emplace_back(begin + ms, begin + me);
      emitted = me;
      pos = me;
    } else {
      // An empty match: step over one character so the loop advances.
      emitted = ms;
      pos = ms + 1;
      while (pos < length && (static_cast<unsigned char>(text[begin + pos]) & 0xC0) == 0x80) ++pos;
    }
  }
  if (length > emitted) pieces.emplace_back(begin + emitted, end);
}

}  // namespace nvllm
