// Stream attributes and ids (cudaStreamSetAttribute, cudaStreamGetAttribute,
// cudaStreamCopyAttributes, cudaStreamGetId).
//
// The attributes a stream takes are hints to the hardware — the L2 access
// policy window, the synchronisation policy, memory synchronisation domains,
// the priority. NVIDIA's runtime accepts them on every device and reports
// back what was set; so does rgpu: each is checked as NVIDIA checks it (a
// window no larger than the device's accessPolicyMaxWindowSize, a hit ratio
// within [0, 1], a known policy), kept per stream in the client, and
// reported by cudaStreamGetAttribute. A priority set this way is what
// cudaStreamGetPriority reports (clamped to the device's range, as at
// creation); the server keeps scheduling the stream at its creation priority.
#include <map>
#include <mutex>

#include "client/api_util.h"

using namespace rgpu;
using namespace rgpu::client;

namespace {

std::mutex g_mu;
// Keyed by the handle (per-thread default streams: the handle and the thread's stream id).
std::map<std::pair<uint64_t, uint32_t>, std::map<int, cudaLaunchAttributeValue>> g_attrs;

Result<std::pair<uint64_t, uint32_t>> keyOf(cudaStream_t s, bool ptsz) {
  auto ref = rt().stream(s, ptsz);
  if (!ref) return ref.status();
  RGPU_TRY(rt().streamInfo(s).status());
  return std::make_pair(reinterpret_cast<uint64_t>(s), ref->id);
}

cudaLaunchAttributeValue defaultValue(cudaStream_t s, cudaLaunchAttributeID id) {
  cudaLaunchAttributeValue v{};
  if (id == cudaLaunchAttributeSynchronizationPolicy) v.syncPolicy = cudaSyncPolicyAuto;
  if (id == cudaLaunchAttributeMemSyncDomainMap) {
    v.memSyncDomainMap.default_ = 0;
    v.memSyncDomainMap.remote = 1;
  }
  if (id == cudaLaunchAttributePriority) {
    auto info = rt().streamInfo(s);
    v.priority = info ? info->second : 0;
  }
  return v;
}

Status checkValue(cudaLaunchAttributeID id, const cudaLaunchAttributeValue& v, int device) {
  switch (id) {
    case cudaLaunchAttributeAccessPolicyWindow: {
      const auto& w = v.accessPolicyWindow;
      if (!(w.hitRatio >= 0.0f && w.hitRatio <= 1.0f)) return Status(err::kInvalidValue, "hitRatio is outside [0, 1]");
      for (auto p : {w.hitProp, w.missProp})
        if (p != cudaAccessPropertyNormal && p != cudaAccessPropertyStreaming && p != cudaAccessPropertyPersisting)
          return Status(err::kInvalidValue, "unknown cudaAccessProperty");
      int max = 0;
      RGPU_TRY(rt().device(device).status());
      auto d = rt().device(device);
      if ((*d)->prop.size() >= sizeof(cudaDeviceProp))
        max = reinterpret_cast<const cudaDeviceProp*>((*d)->prop.data())->accessPolicyMaxWindowSize;
      if (w.num_bytes > static_cast<size_t>(max))
        return Status(err::kInvalidValue, "the access policy window of " + std::to_string(w.num_bytes) +
                                              " bytes is larger than the device's accessPolicyMaxWindowSize " +
                                              std::to_string(max));
      return Status::ok();
    }
    case cudaLaunchAttributeSynchronizationPolicy:
      if (v.syncPolicy < cudaSyncPolicyAuto || v.syncPolicy > cudaSyncPolicyBlockingSync)
        return Status(err::kInvalidValue, "unknown cudaSynchronizationPolicy");
      return Status::ok();
    case cudaLaunchAttributeMemSyncDomain:
      if (v.memSyncDomain != cudaLaunchMemSyncDomainDefault && v.memSyncDomain != cudaLaunchMemSyncDomainRemote)
        return Status(err::kInvalidValue, "unknown cudaLaunchMemSyncDomain");
      return Status::ok();
    case cudaLaunchAttributeMemSyncDomainMap:
    case cudaLaunchAttributePriority:
      return Status::ok();
    default:
      return Status(err::kInvalidValue, "launch attribute " + std::to_string(static_cast<int>(id)) +
                                            " is not a stream attribute");
  }
}

Status setAttribute(cudaStream_t s, cudaLaunchAttributeID id, const cudaLaunchAttributeValue* value, bool ptsz) {
  RGPU_TRY(needPtr(value, "value"));
  auto key = keyOf(s, ptsz);
  if (!key) return key.status();
  auto ref = rt().stream(s, ptsz);
  RGPU_TRY(checkValue(id, *value, ref->device));
  cudaLaunchAttributeValue v = *value;
  if (id == cudaLaunchAttributePriority) {
    v.priority = std::clamp(v.priority, -5, 0);  // cudaDeviceGetStreamPriorityRange
    RGPU_TRY(rt().setStreamPriority(s, v.priority));
    return Status::ok();  // reported by streamInfo
  }
  std::lock_guard lock(g_mu);
  g_attrs[*key][static_cast<int>(id)] = v;
  return Status::ok();
}

Status getAttribute(cudaStream_t s, cudaLaunchAttributeID id, cudaLaunchAttributeValue* out, bool ptsz) {
  RGPU_TRY(needPtr(out, "value_out"));
  auto key = keyOf(s, ptsz);
  if (!key) return key.status();
  cudaLaunchAttributeValue probe = defaultValue(s, id);
  RGPU_TRY(id == cudaLaunchAttributeAccessPolicyWindow ? Status::ok() : checkValue(id, probe, 0));
  *out = probe;
  if (id == cudaLaunchAttributePriority) return Status::ok();
  std::lock_guard lock(g_mu);
  if (auto it = g_attrs.find(*key); it != g_attrs.end())
    if (auto a = it->second.find(static_cast<int>(id)); a != it->second.end()) *out = a->second;
  return Status::ok();
}

Status copyAttributes(cudaStream_t dst, cudaStream_t src, bool ptsz) {
  auto from = keyOf(src, ptsz);
  if (!from) return from.status();
  auto to = keyOf(dst, ptsz);
  if (!to) return to.status();
  auto prio = rt().streamInfo(src);
  RGPU_TRY(rt().setStreamPriority(dst, prio->second));
  std::lock_guard lock(g_mu);
  auto it = g_attrs.find(*from);
  if (it == g_attrs.end()) g_attrs.erase(*to);
  else g_attrs[*to] = it->second;
  return Status::ok();
}

Status streamId(cudaStream_t s, unsigned long long* out, bool ptsz) {
  RGPU_TRY(needPtr(out, "streamId"));
  auto ref = rt().stream(s, ptsz);
  if (!ref) return ref.status();
  RGPU_TRY(rt().streamInfo(s).status());
  *out = ref->id;
  return Status::ok();
}

}  // namespace

RGPU_EXPORT cudaError_t cudaStreamSetAttribute(cudaStream_t hStream, cudaStreamAttrID attr,
                                               const cudaStreamAttrValue* value) {
  return guarded([&] { return setAttribute(hStream, attr, value, false); });
}
RGPU_EXPORT cudaError_t cudaStreamSetAttribute_ptsz(cudaStream_t hStream, cudaStreamAttrID attr,
                                                    const cudaStreamAttrValue* value) {
  return guarded([&] { return setAttribute(hStream, attr, value, true); });
}
RGPU_EXPORT cudaError_t cudaStreamGetAttribute(cudaStream_t hStream, cudaStreamAttrID attr,
                                               cudaStreamAttrValue* value_out) {
  return guarded([&] { return getAttribute(hStream, attr, value_out, false); });
}
RGPU_EXPORT cudaError_t cudaStreamGetAttribute_ptsz(cudaStream_t hStream, cudaStreamAttrID attr,
                                                    cudaStreamAttrValue* value_out) {
  return guarded([&] { return getAttribute(hStream, attr, value_out, true); });
}
RGPU_EXPORT cudaError_t cudaStreamCopyAttributes(cudaStream_t dst, cudaStream_t src) {
  return guarded([&] { return copyAttributes(dst, src, false); });
}
RGPU_EXPORT cudaError_t cudaStreamCopyAttributes_ptsz(cudaStream_t dst, cudaStream_t src) {
  return guarded([&] { return copyAttributes(dst, src, true); });
}
RGPU_EXPORT cudaError_t cudaStreamGetId(cudaStream_t hStream, unsigned long long* streamId) {
  return guarded([&] { return ::streamId(hStream, streamId, false); });
}
RGPU_EXPORT cudaError_t cudaStreamGetId_ptsz(cudaStream_t hStream, unsigned long long* streamId) {
  return guarded([&] { return ::streamId(hStream, streamId, true); });
}
