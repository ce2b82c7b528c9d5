#include "common/call_message.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

namespace rgpu::common {
namespace {
alignas(64) thread_local capnp::word tl_scratch[CallMessage::kScratchWords];  // all zeros while free
thread_local bool tl_scratch_busy = false;
}  // namespace

CallMessage::CallMessage(unsigned first_words) : next_words_(std::max(first_words, 1u)) {
  if (first_words <= kScratchWords && !tl_scratch_busy) {
    tl_scratch_busy = true;
    scratch_ = tl_scratch;
  }
}

CallMessage::~CallMessage() noexcept(false) {
  if (scratch_) {
    if (scratch_given_) {
      auto segments = getSegmentsForOutput();
      if (segments.size() > 0) std::memset(scratch_, 0, segments[0].size() * sizeof(capnp::word));
    }
    tl_scratch_busy = false;
  }
  for (void* p : owned_) std::free(p);
}

kj::ArrayPtr<capnp::word> CallMessage::allocateSegment(unsigned minimum_words) {
  if (!first_done_) {
    first_done_ = true;
    if (scratch_ && minimum_words <= kScratchWords) {
      scratch_given_ = true;
      next_words_ = kScratchWords;
      return {scratch_, kScratchWords};
    }
  }
  // As MallocMessageBuilder's GROW_HEURISTICALLY: each segment at least the
  // size of all before it.
  size_t words = std::max<size_t>(minimum_words, next_words_);
  void* p = std::calloc(words, sizeof(capnp::word));
  if (!p) throw std::bad_alloc();
  owned_.push_back(p);
  next_words_ += words;
  return {static_cast<capnp::word*>(p), words};
}

}  // namespace rgpu::common
