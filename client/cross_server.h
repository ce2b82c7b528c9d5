// Operations between devices of two servers, for a program the pool spread
// over several members (docs/pool.md "One program, several members").
//
// The servers never talk to each other: the client carries what crosses.
//  - Copies whose two sides are on two servers, or whose device side is on
//    another server than the stream's, are relayed through this process in
//    pieces of one frame: the stream's earlier work is waited for first, the
//    pieces travel on the legacy streams of the devices that hold the bytes,
//    and the copy is complete when the call returns (an Async form too).
//  - cudaStreamWaitEvent on another server's event: a private stream there
//    waits for the event and then runs a host function; the waiting stream
//    runs a host function that the client lets finish only once the other
//    has run (a gate: Runtime::addGate). No thread of the client blocks on
//    it, so waits in both directions cannot deadlock. A gate whose event's
//    server is lost opens, with a warning, rather than hold the stream forever.
#pragma once

#include <cuda_runtime_api.h>

#include "client/runtime.h"

namespace rgpu::client {

// Whether a copy of kind `kind` (resolved) between `dst` and `src` on stream
// `s` crosses servers; if so it is done here and *st says how it went.
bool relayCopy(void* dst, const void* src, size_t count, cudaMemcpyKind kind, StreamRef s, Status* st);
// A peer copy between devices of two servers (`serialize`: cudaMemcpyPeer,
// ordered with the work on both devices).
Status relayPeer(void* dst, int dst_device, const void* src, int src_device, size_t count, StreamRef s);
// A memset of memory on another server than stream `s`'s: false when it is not.
bool relayMemset(void* dst, int value, size_t count, StreamRef s, Status* st);
// Stream `s` waits for event `event` of device `event_device` on another server.
Status waitAcrossServers(StreamRef s, uint32_t event, int event_device);

}  // namespace rgpu::client
