// Texture and surface objects. The server makes them (the sim: descriptors
// its interpreter samples; the CUDA backend: real CUtexObject/CUsurfObject)
// and answers the value kernels take as a parameter; the client keeps the
// descriptors it was given, for the cudaGet*ObjectDesc queries.
#include <mutex>
#include <unordered_map>

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
std::unordered_map<uint64_t, TextureInfo>& textures() {
  static auto* m = new std::unordered_map<uint64_t, TextureInfo>;
  return *m;
}
std::unordered_map<uint64_t, SurfaceInfo>& surfaces() {
  static auto* m = new std::unordered_map<uint64_t, SurfaceInfo>;
  return *m;
}

void setFormat(rgpu::wire::ChannelFormat::Builder f, const cudaChannelFormatDesc& d) {
  f.setX(d.x), f.setY(d.y), f.setZ(d.z), f.setW(d.w), f.setKind(static_cast<int32_t>(d.f));
}

Status destroyOnServer(bool texture, uint64_t handle, int device) {
  capnp::MallocMessageBuilder msg(32);
  auto req = msg.initRoot<rgpu::wire::Request>();
  if (texture) req.initTextureDestroy().setHandle(handle);
  else req.initSurfaceDestroy().setHandle(handle);
  return rt().postOn(device, msg);
}

// Object values are each server's own: two servers of a program the pool
// spread may give the same one (sim members never do: docs/pool.md). A
// kernel could not tell them apart, so the second is refused.
Status checkFresh(bool texture, uint64_t handle, int device) {
  {
    std::lock_guard lock(objectsMutex());
    if (texture ? !textures().count(handle) : !surfaces().count(handle)) return Status::ok();
  }
  (void)destroyOnServer(texture, handle, device);
  rgpu::common::logOnce("object-collides", std::string("a ") + (texture ? "texture" : "surface") +
                                               " object of device " + std::to_string(device) +
                                               " has the value of one of another pool member's: not supported by rgpu "
                                               "(returns cudaErrorNotSupported)");
  return Status(err::kNotSupported, "texture and surface object values of two pool members coincide");
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
  capnp::MallocMessageBuilder msg(128);
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
  RGPU_TRY(checkFresh(true, handle, device));
  *out = handle;
  std::lock_guard lock(objectsMutex());
  textures()[handle] = {device, *res, *td};
  return Status::ok();
}

Status destroyObject(bool texture, uint64_t handle) {
  int device = -1;
  {
    std::lock_guard lock(objectsMutex());
    if (texture) {
      auto it = textures().find(handle);
      if (it != textures().end()) device = it->second.device, textures().erase(it);
    } else {
      auto it = surfaces().find(handle);
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
    auto it = textures().find(tex);
    if (it == textures().end()) return Status(err::kInvalidValue, "not a texture object of this process");
    *pResDesc = it->second.res;
    return Status::ok();
  });
}

RGPU_EXPORT cudaError_t cudaGetTextureObjectTextureDesc(struct cudaTextureDesc* pTexDesc, cudaTextureObject_t tex) {
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(pTexDesc, "pTexDesc"));
    std::lock_guard lock(objectsMutex());
    auto it = textures().find(tex);
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
    if (!textures().count(tex)) return Status(err::kInvalidValue, "not a texture object of this process");
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
    capnp::MallocMessageBuilder msg(32);
    auto m = msg.initRoot<rgpu::wire::Request>().initSurfaceCreate();
    m.setArray((*a)->handle);
    m.setLevel((*a)->level);
    auto r = rt().callOn((*a)->device, msg);
    if (!r) return r.status();
    const uint64_t handle = static_cast<uint64_t>(r->reader().getValue());
    RGPU_TRY(checkFresh(false, handle, (*a)->device));
    *pSurfObject = handle;
    std::lock_guard lock(objectsMutex());
    surfaces()[handle] = {(*a)->device, *pResDesc};
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
    auto it = surfaces().find(surf);
    if (it == surfaces().end()) return Status(err::kInvalidValue, "not a surface object of this process");
    *pResDesc = it->second.res;
    return Status::ok();
  });
}
