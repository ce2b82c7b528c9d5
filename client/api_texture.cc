// Texture and surface objects. The server makes them (the sim: descriptors
// its interpreter samples; the CUDA backend: real CUtexObject/CUsurfObject)
// and answers the value kernels take as a parameter; the client keeps the
// descriptors it was given, for the cudaGet*ObjectDesc queries.
//
// A value names an object of one device: a driver may give each device's
// context its own values, and two members of a pool have drivers of their
// own, so two devices' objects can have the same value (each kernel takes
// the one of its device). The tables hold each value's objects with their
// devices; a call naming a value means the current device's object, or the
// only object with that value.
#include <map>
#include <mutex>

#include "client/api_util.h"
#include "client/arrays.h"

using namespace rgpu::client;
using rgpu::Result;
using rgpu::Status;
namespace err = rgpu::err;

namespace {

struct TextureInfo {
  int device = 0;
  cudaResourceDesc res{};
  cudaTextureDesc tex{};
};
struct SurfaceInfo {
  int device = 0;
  cudaResourceDesc res{};
};

std::mutex& objectsMutex() {
  static std::mutex mu;
  return mu;
}
std::multimap<uint64_t, TextureInfo>& textures() {
  static auto* m = new std::multimap<uint64_t, TextureInfo>;
  return *m;
}
std::multimap<uint64_t, SurfaceInfo>& surfaces() {
  static auto* m = new std::multimap<uint64_t, SurfaceInfo>;
  return *m;
}

// The object `handle` names (objectsMutex held): the current device's, or
// the only one with that value; end() if none.
template <typename Info>
typename std::multimap<uint64_t, Info>::iterator objectNamed(std::multimap<uint64_t, Info>& table, uint64_t handle) {
  auto [first, last] = table.equal_range(handle);
  if (first == last || std::next(first) == last) return first == last ? table.end() : first;
  const int current = rt().currentDevice();
  for (auto it = first; it != last; ++it)
    if (it->second.device == current) return it;
  return table.end();
}

// Records an object the server made: a value the table holds for the same
// device is stale (the server's own table refuses a value twice).
template <typename Info>
void remember(std::multimap<uint64_t, Info>& table, uint64_t handle, const Info& info) {
  auto [first, last] = table.equal_range(handle);
  for (auto it = first; it != last; ++it)
    if (it->second.device == info.device) {
      it->second = info;
      return;
    }
  table.emplace(handle, info);
}

void setFormat(rgpu::wire::ChannelFormat::Builder f, const cudaChannelFormatDesc& d) {
  f.setX(d.x), f.setY(d.y), f.setZ(d.z), f.setW(d.w), f.setKind(static_cast<int32_t>(d.f));
}

Status destroyOnServer(bool texture, uint64_t handle, int device) {
  rgpu::common::CallMessage msg(32);
  auto req = msg.initRoot<rgpu::wire::Request>();
  auto ref = texture ? req.initTextureDestroy() : req.initSurfaceDestroy();
  ref.setHandle(handle);
  ref.setDevice(device);
  return rt().postOn(device, msg);
}

Status createTexture(cudaTextureObject_t* out, const cudaResourceDesc* res, const cudaTextureDesc* td,
                     const cudaResourceViewDesc* view) {
  RGPU_TRY(needPtr(out, "pTexObject"));
  RGPU_TRY(needPtr(res, "pResDesc"));
  RGPU_TRY(needPtr(td, "pTexDesc"));
  if (view) {
    rgpu::common::logOnce("unsupported:cudaResourceViewDesc",
                          "texture resource views (cudaResourceViewDesc) are not supported by rgpu (returns cudaErrorNotSupported)");
    return Status(err::kNotSupported, "texture resource views are not supported by rgpu");
  }
  rgpu::common::CallMessage msg(128);
  auto m = msg.initRoot<rgpu::wire::Request>().initTextureCreate();
  int device = rt().currentDevice();
  switch (res->resType) {
    case cudaResourceTypeArray: {
      auto a = arrayOf(res->res.array.array);
      if (!a) return a.status();
      device = (*a)->device;
      m.setResource(rgpu::wire::TextureResource::ARRAY);
      m.setHandle((*a)->handle);
      m.setLevel((*a)->level);
      break;
    }
    case cudaResourceTypeMipmappedArray: {
      auto a = mipmappedLevel(res->res.mipmap.mipmap, 0);  // its first level names it
      if (!a) return a.status();
      device = (*a)->device;
      m.setResource(rgpu::wire::TextureResource::MIPMAPPED_ARRAY);
      m.setHandle((*a)->handle);
      break;
    }
    case cudaResourceTypeLinear:
      m.setResource(rgpu::wire::TextureResource::LINEAR);
      m.setPtr(reinterpret_cast<uint64_t>(res->res.linear.devPtr));
      setFormat(m.initFormat(), res->res.linear.desc);
      m.setSize(res->res.linear.sizeInBytes);
      rt().classify(res->res.linear.devPtr, &device);
      break;
    case cudaResourceTypePitch2D:
      m.setResource(rgpu::wire::TextureResource::PITCH2_D);
      m.setPtr(reinterpret_cast<uint64_t>(res->res.pitch2D.devPtr));
      setFormat(m.initFormat(), res->res.pitch2D.desc);
      m.setWidth(res->res.pitch2D.width);
      m.setHeight(res->res.pitch2D.height);
      m.setPitch(res->res.pitch2D.pitchInBytes);
      rt().classify(res->res.pitch2D.devPtr, &device);
      break;
    default:
      return Status(err::kInvalidValue, "unknown resource type");
  }
  m.setDevice(device);
  auto modes = m.initAddressMode(3);
  for (unsigned i = 0; i < 3; ++i) modes.set(i, td->addressMode[i]);
  m.setFilterMode(td->filterMode);
  m.setReadMode(td->readMode);
  m.setSRGB(td->sRGB != 0);
  auto border = m.initBorderColor(4);
  for (unsigned i = 0; i < 4; ++i) border.set(i, td->borderColor[i]);
  m.setNormalizedCoords(td->normalizedCoords != 0);
  m.setMaxAnisotropy(td->maxAnisotropy);
  m.setMipmapFilterMode(td->mipmapFilterMode);
  m.setMipmapLevelBias(td->mipmapLevelBias);
  m.setMinMipmapLevelClamp(td->minMipmapLevelClamp);
  m.setMaxMipmapLevelClamp(td->maxMipmapLevelClamp);
  m.setDisableTrilinearOptimization(td->disableTrilinearOptimization != 0);
  m.setSeamlessCubemap(td->seamlessCubemap != 0);
  auto r = rt().call(msg);
  if (!r) return r.status();
  const uint64_t handle = static_cast<uint64_t>(r->reader().getValue());
  *out = handle;
  std::lock_guard lock(objectsMutex());
  remember(textures(), handle, TextureInfo{device, *res, *td});
  return Status::ok();
}

Status destroyObject(bool texture, uint64_t handle) {
  int device = -1;
  {
    std::lock_guard lock(objectsMutex());
    if (texture) {
      auto it = objectNamed(textures(), handle);
      if (it != textures().end()) device = it->second.device, textures().erase(it);
    } else {
      auto it = objectNamed(surfaces(), handle);
      if (it != surfaces().end()) device = it->second.device, surfaces().erase(it);
    }
    if (device < 0)
      return Status(err::kInvalidValue, std::string(texture ? "texture" : "surface") + " object " +
                                            std::to_string(handle) + " is not one of this process's");
  }
  return destroyOnServer(texture, handle, device);
}

}  // namespace

void rgpu::client::forgetDeviceObjects(int device) {
  std::lock_guard lock(objectsMutex());
  std::erase_if(textures(), [&](const auto& t) { return t.second.device == device; });
  std::erase_if(surfaces(), [&](const auto& s) { return s.second.device == device; });
}

RGPU_EXPORT cudaError_t cudaCreateTextureObject(cudaTextureObject_t* pTexObject, const struct cudaResourceDesc* pResDesc,
                                                const struct cudaTextureDesc* pTexDesc,
                                                const struct cudaResourceViewDesc* pResViewDesc) {
  return guarded([&] { return createTexture(pTexObject, pResDesc, pTexDesc, pResViewDesc); });
}

RGPU_EXPORT cudaError_t cudaDestroyTextureObject(cudaTextureObject_t texObject) {
  return guarded([&] { return texObject ? destroyObject(true, texObject) : Status::ok(); });
}

RGPU_EXPORT cudaError_t cudaGetTextureObjectResourceDesc(struct cudaResourceDesc* pResDesc, cudaTextureObject_t tex) {
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(pResDesc, "pResDesc"));
    std::lock_guard lock(objectsMutex());
    auto it = objectNamed(textures(), tex);
    if (it == textures().end()) return Status(err::kInvalidValue, "not a texture object of this process");
    *pResDesc = it->second.res;
    return Status::ok();
  });
}

RGPU_EXPORT cudaError_t cudaGetTextureObjectTextureDesc(struct cudaTextureDesc* pTexDesc, cudaTextureObject_t tex) {
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(pTexDesc, "pTexDesc"));
    std::lock_guard lock(objectsMutex());
    auto it = objectNamed(textures(), tex);
    if (it == textures().end()) return Status(err::kInvalidValue, "not a texture object of this process");
    *pTexDesc = it->second.tex;
    return Status::ok();
  });
}

RGPU_EXPORT cudaError_t cudaGetTextureObjectResourceViewDesc(struct cudaResourceViewDesc* pResViewDesc,
                                                             cudaTextureObject_t tex) {
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(pResViewDesc, "pResViewDesc"));
    std::lock_guard lock(objectsMutex());
    if (objectNamed(textures(), tex) == textures().end())
      return Status(err::kInvalidValue, "not a texture object of this process");
    // Made without a view (rgpu takes none): the view is the whole resource, as NVIDIA's reports it.
    *pResViewDesc = cudaResourceViewDesc{};
    return Status::ok();
  });
}

RGPU_EXPORT cudaError_t cudaCreateSurfaceObject(cudaSurfaceObject_t* pSurfObject, const struct cudaResourceDesc* pResDesc) {
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(pSurfObject, "pSurfObject"));
    RGPU_TRY(needPtr(pResDesc, "pResDesc"));
    if (pResDesc->resType != cudaResourceTypeArray)
      return Status(err::kInvalidValue, "a surface object's resource is an array");
    auto a = arrayOf(pResDesc->res.array.array);
    if (!a) return a.status();
    rgpu::common::CallMessage msg(32);
    auto m = msg.initRoot<rgpu::wire::Request>().initSurfaceCreate();
    m.setArray((*a)->handle);
    m.setLevel((*a)->level);
    auto r = rt().callOn((*a)->device, msg);
    if (!r) return r.status();
    const uint64_t handle = static_cast<uint64_t>(r->reader().getValue());
    *pSurfObject = handle;
    std::lock_guard lock(objectsMutex());
    remember(surfaces(), handle, SurfaceInfo{(*a)->device, *pResDesc});
    return Status::ok();
  });
}

RGPU_EXPORT cudaError_t cudaDestroySurfaceObject(cudaSurfaceObject_t surfObject) {
  return guarded([&] { return surfObject ? destroyObject(false, surfObject) : Status::ok(); });
}

RGPU_EXPORT cudaError_t cudaGetSurfaceObjectResourceDesc(struct cudaResourceDesc* pResDesc, cudaSurfaceObject_t surf) {
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(pResDesc, "pResDesc"));
    std::lock_guard lock(objectsMutex());
    auto it = objectNamed(surfaces(), surf);
    if (it == surfaces().end()) return Status(err::kInvalidValue, "not a surface object of this process");
    *pResDesc = it->second.res;
    return Status::ok();
  });
}
