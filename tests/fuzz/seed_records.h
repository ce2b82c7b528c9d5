// Seed records of fuzz_dispatch's corpus (make_dispatch_seeds.cc): one
// request built by `fill`, appended in the record format of dispatch_input.h.
#pragma once

#include <string>

#include "protocol/rgpu.capnp.h"
#include "tests/fuzz/dispatch_input.h"

namespace rgpu::fuzz {

template <typename F>
void add(std::string& out, bool async, F fill, const std::string& bulk = "", bool lz4 = false,
         bool release_held = false) {
  capnp::MallocMessageBuilder msg;
  fill(msg.initRoot<wire::Request>());
  appendRecord(out, async, msg, bulk, lz4, release_held);
}

// (dispatch_seeds_rand.cc) cuRAND generations of every kind of generator, for libraries.bin.
void appendRandSeeds(std::string& out);

}  // namespace rgpu::fuzz
