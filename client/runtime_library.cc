// Libraries (the cudaLibrary* API, client/api_library.cc): modules the program
// holds as data, registered as modules of the Runtime's with every kernel of
// the image; variables are found on the server by name when first asked for.
// Handles carry kLibraryTag and the module's index; an unloaded library's
// kernels and handle are refused (Runtime::kernelByHostFun, kernelByHandle).
#include "client/runtime.h"

#include "common/log.h"

namespace rgpu::client {
namespace {
constexpr uint64_t kTagMask = 0xffff'ffff'0000'0000ull;
}  // namespace

Result<uint32_t> Runtime::loadLibrary(std::string image) {
  auto parsed = common::parseImage(image.data(), image.size());
  if (!parsed) return Status(err::kInvalidKernelImage, parsed.status().message());
  std::unique_lock lock(reg_mu_);
  ModuleRecord m;
  m.index = static_cast<uint32_t>(modules_.size());
  m.library = true;
  m.fatbin = std::move(image);
  m.kernels = std::move(parsed->kernels);
  for (auto& [name, info] : m.kernels) {
    KernelRecord k;
    k.index = static_cast<uint32_t>(kernels_.size());
    k.module = m.index;
    k.name = name;
    k.has_layout = true;
    k.layout = info;
    m.kernel_ids.push_back(k.index);
    kernels_.push_back(std::move(k));
  }
  modules_.push_back(std::move(m));
  return modules_.back().index;
}

cudaLibrary_t Runtime::libraryHandle(uint32_t module) const {
  return reinterpret_cast<cudaLibrary_t>(kLibraryTag | module);
}

Result<uint32_t> Runtime::libraryOf(cudaLibrary_t lib) {
  auto v = reinterpret_cast<uint64_t>(lib);
  std::shared_lock lock(reg_mu_);
  auto idx = static_cast<uint32_t>(v);
  if ((v & kTagMask) != kLibraryTag || idx >= modules_.size() || !modules_[idx].library || modules_[idx].unloaded)
    return Status(err::kInvalidResourceHandle, "not a loaded library");
  return idx;
}

Status Runtime::unloadLibrary(uint32_t module) {
  uint64_t shipped;
  std::vector<uint64_t> addresses;
  {
    std::unique_lock lock(reg_mu_);
    ModuleRecord& m = modules_[module];
    m.unloaded = true;
    shipped = m.shipped;
    m.shipped = 0;
    for (uint32_t v : m.var_ids)
      for (auto& [device, addr] : vars_[v].address) addresses.push_back(addr);
  }
  for (uint64_t a : addresses) untrackDevice(a);  // no longer device memory
  for (int d = 0; d < 64; ++d) {
    if (!(shipped & (1ull << d))) continue;
    common::CallMessage msg(32);
    msg.initRoot<wire::Request>().initModuleUnload().setId((module + 1) << 6 | static_cast<uint32_t>(d));
    RGPU_TRY(post(msg));
  }
  return Status::ok();
}

std::vector<cudaKernel_t> Runtime::libraryKernels(uint32_t module) {
  std::shared_lock lock(reg_mu_);
  std::vector<cudaKernel_t> out;
  for (uint32_t k : modules_[module].kernel_ids) out.push_back(handleOf(kernels_[k]));
  return out;
}

Result<cudaKernel_t> Runtime::libraryKernel(uint32_t module, const std::string& name) {
  std::shared_lock lock(reg_mu_);
  for (uint32_t k : modules_[module].kernel_ids)
    if (kernels_[k].name == name) return handleOf(kernels_[k]);
  return Status(err::kNotFound, "the library has no kernel named '" + name + "'");
}

Result<std::pair<uint64_t, uint64_t>> Runtime::libraryGlobal(uint32_t module, const std::string& name, int device) {
  uint32_t vid = 0;
  bool known = false, post_now = false;
  {
    std::unique_lock lock(reg_mu_);
    ModuleRecord& m = modules_[module];
    for (uint32_t v : m.var_ids)
      if (vars_[v].name == name) vid = v, known = true;
    if (known) {
      if (auto a = vars_[vid].address.find(device); a != vars_[vid].address.end())
        return std::make_pair(a->second, vars_[vid].size);
    } else {
      VarRecord v;  // its size comes from the server
      v.index = vid = static_cast<uint32_t>(vars_.size());
      v.module = module;
      v.name = name;
      m.var_ids.push_back(v.index);
      vars_.push_back(std::move(v));
    }
    post_now = (m.shipped >> device) & 1;  // shipped before the variable was known there
  }
  RGPU_TRY(ensureShipped(module, device));
  if (post_now && !known) {
    common::CallMessage msg(64);
    auto vr = msg.initRoot<wire::Request>().initVarRegister();
    vr.setId((vid + 1) << 6 | static_cast<uint32_t>(device));
    vr.setModule((module + 1) << 6 | static_cast<uint32_t>(device));
    vr.setName(name);
    RGPU_TRY(post(msg));
  }
  auto where = resolveVar(vid, device);
  if (!where) {
    if (where.status().code() == err::kInvalidSymbol || where.status().code() == err::kInvalidValue)
      return Status(err::kNotFound, "the library has no variable named '" + name + "'");
    return where.status();
  }
  auto [addr, size] = *where;
  // A device address from now on, for copies and pointer queries (as cudaGetSymbolAddress's).
  if (trackDevice(addr, size, device) == DeviceRanges::Result::kCollides)
    RGPU_LOG_WARN("library variable {} at {:#x} overlaps this process's own memory", name, addr);
  std::unique_lock lock(reg_mu_);
  vars_[vid].size = size;
  return std::make_pair(addr, size);
}

}  // namespace rgpu::client
