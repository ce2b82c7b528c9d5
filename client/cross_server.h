// Operations between devices of two servers, for a program the pool spread
// over several members (docs/pool.md "One program, several members").
//
// The servers never talk to each other: the client carries what crosses.
//  - Copies and memsets whose device memory is on another server than the
//    stream's run there: the stream's earlier work is waited for first, the
//    operation runs on the legacy stream of the device holding the bytes,
//    and it is complete when the call returns (an Async form too). Between
//    devices of two servers the bytes are relayed through this process, in
//    pieces of kRelayPiece.
//  - cudaStreamWaitEvent on another server's event: a private stream there
//    waits for the event and then runs a host function; the waiting stream
//    runs a host function that the client lets finish only once the other
//    has run (a gate: Runtime::addGate). No thread of the client blocks on
//    it, so waits in both directions cannot deadlock. A gate whose event's
//    server is lost opens, with a warning, rather than hold the stream forever.
#pragma once

#include <cuda_runtime_api.h>

#include <optional>

#include "client/runtime.h"

namespace rgpu::client {

// Stream `s`'s work is done (cudaStreamSynchronize on a reference).
Status synchronize(StreamRef s);
// For a copy or memset whose device memory at `p` is on another server than
// stream `s`'s: waits for `s`'s work and answers the legacy stream of the
// device holding `p`, where the operation then runs (complete on return:
// the caller synchronises). None when `p` is not there.
Result<std::optional<StreamRef>> streamOfServerHolding(const void* p, StreamRef s);
// A peer copy between devices of which one is on another server than the
// other or than stream `s` (cudaMemcpyPeer and device-to-device copies):
// after `s`'s work, on the devices' legacy streams, complete on return.
Status relayPeer(void* dst, int dst_device, const void* src, int src_device, size_t count, StreamRef s);
// Stream `s` waits for event `event` of device `event_device` on another server.
Status waitAcrossServers(StreamRef s, uint32_t event, int event_device);

}  // namespace rgpu::client
