// A Cap'n Proto message builder for one call, whose first segment is a
// per-thread scratch area instead of a fresh calloc'd one.
//
// Every CUDA call the client forwards builds one small message, encodes it
// into a frame and drops it. With capnp::MallocMessageBuilder each of those
// is a calloc and a free (a fifth of an asynchronous call's time on the
// client). CallMessage reuses one zeroed area per thread:
//  - the first CallMessage alive on a thread takes the scratch (kScratchWords);
//    its destructor zeroes the part it used and hands the scratch back, so the
//    area is all zeros whenever it is free (Cap'n Proto's rule for a first
//    segment it is given);
//  - a second one alive at the same time on that thread (a call that sends
//    another call while building its own), or one asking for a first segment
//    larger than the scratch, allocates from the heap as MallocMessageBuilder
//    does; later segments always come from the heap, each at least as large
//    as all before it.
// A CallMessage never leaves the thread that made it.
#pragma once

#include <capnp/message.h>

#include <cstddef>
#include <vector>

namespace rgpu::common {

class CallMessage final : public capnp::MessageBuilder {
 public:
  static constexpr unsigned kScratchWords = 512;  // 4 KiB: a launch with its parameters fits

  // `first_words`: the first segment's size, as MallocMessageBuilder's.
  explicit CallMessage(unsigned first_words = 32);
  ~CallMessage() noexcept(false) override;
  CallMessage(const CallMessage&) = delete;
  CallMessage& operator=(const CallMessage&) = delete;

  kj::ArrayPtr<capnp::word> allocateSegment(unsigned minimum_words) override;

  bool usesScratch() const { return scratch_ != nullptr; }  // (tests)

 private:
  capnp::word* scratch_ = nullptr;  // this thread's scratch, while this message holds it
  bool scratch_given_ = false;      // the scratch became the first segment
  bool first_done_ = false;
  size_t next_words_;
  std::vector<void*> owned_;        // heap segments
};

}  // namespace rgpu::common
