// The session's module requests: fatbins, kernels and variables, symbols,
// launches, function attributes and occupancy. A module that fails to load is
// remembered with its error, which its kernels and variables answer with.
#include "common/log.h"
#include "protocol/frame.h"
#include "server/session/session.h"

namespace rgpu::server {

using protocol::FrameHeader;

void Session::forgetModule(uint32_t id) {
  ++graph_epoch_;  // native graphs may launch its kernels
  for (auto it = vars_.begin(); it != vars_.end();) {
    if (it->second.module != id) {
      ++it;
      continue;
    }
    if (it->second.addr) allocs_.forget(it->second.addr);
    it = vars_.erase(it);
  }
  // Its kernels go with it.
  std::erase_if(functions_, [id](const auto& f) { return f.second.module == id; });
  modules_.erase(id);
  module_errors_.erase(id);
  module_images_.erase(id);
}

Status Session::usableFunction(uint32_t id) const {
  auto f = functions_.find(id);
  return f == functions_.end() ? Status(err::kInvalidDeviceFunction, "unknown function") : f->second.unusable;
}

Status Session::canRegister(uint64_t module) const {
  const auto& L = cfg_.limits;
  if (!modules_.count(module)) return Status(err::kInvalidResourceHandle, "unknown module");
  if (functions_.size() + vars_.size() >= L.max_functions)
    return Status(err::kLaunchOutOfResources, "session limit of kernels and variables reached (max_functions = " +
                                                  std::to_string(L.max_functions) + ")");
  return Status::ok();
}

Status Session::onModuleLoad(const FrameHeader& h, wire::Request::Reader req) {
  const auto& L = cfg_.limits;
  auto m = req.getModuleLoad();
  Status s = checkDevice(m.getDevice());
  if (s && (m.getId() == 0 || modules_.count(m.getId()))) s = Status(err::kInvalidValue, "module id in use");
  if (s && modules_.size() >= L.max_modules)
    s = Status(err::kLaunchOutOfResources, "session module limit reached (max_modules = " + std::to_string(L.max_modules) + ")");
  if (s && h.bulk_len > protocol::kMaxFatbinBytes) s = Status(err::kInvalidKernelImage, "fatbin too large");
  if (!s) {
    RGPU_TRY(consumeBulk(h, h.bulk_len, nullptr));
    return finish(h, s), Status::ok();
  }
  Staging data;
  RGPU_TRY(consumeBulk(h, h.bulk_len, &data));
  if (!data) return finish(h, stagingRefused(h.bulk_len)), Status::ok();
  std::string image(data->begin(), data->end());
  s = backend_->loadModule(m.getId(), m.getDevice(), image);
  modules_[m.getId()] = m.getDevice();
  if (s) module_images_[m.getId()] = std::move(image);
  if (!s) {
    // As NVIDIA's lazy loading: the error belongs to the module's kernels
    // and variables, and is the answer of whatever first uses them (a
    // launch, cudaFuncGetAttributes, a symbol copy), not of an unrelated
    // later call. (A synchronous load is answered with it as well.)
    RGPU_LOG_WARN("session {}: module {} rejected: {}", session_id_, m.getId(), s.message());
    module_errors_[m.getId()] = s;
  }
  finish(h, h.flags & protocol::kFlagAsync ? Status::ok() : s);
  return Status::ok();
}

Status Session::onModuleUnload(const FrameHeader& h, wire::Request::Reader req) {
  RGPU_TRY(bulkNotExpected(h));
  uint32_t id = req.getModuleUnload().getId();
  auto mod = modules_.find(id);
  if (mod == modules_.end()) return finish(h, Status(err::kInvalidResourceHandle, "unknown module")), Status::ok();
  int dev = mod->second;
  bool loaded = !module_errors_.count(id);
  forgetModule(id);
  if (!loaded) return finish(h, Status::ok()), Status::ok();
  // Unloading may synchronise the device: it happens once the device's
  // queued work is done (launches already queued still run), off the
  // dispatch thread, which a pending host function may be waiting for.
  Status s = backend_->afterDeviceDone(dev, [this, id] { return backend_->unloadModule(id); },
                                       [this](Status r) {
                                         if (!r) recordAsyncError(r);
                                       });
  finish(h, s);
  return Status::ok();
}

Status Session::onFunctionRegister(const FrameHeader& h, wire::Request::Reader req) {
  RGPU_TRY(bulkNotExpected(h));
  auto m = req.getFunctionRegister();
  Status s = canRegister(m.getModule());
  if (s) {
    // A kernel that cannot run (its module failed to load, or the module
    // lacks it) stays registered with that error: its launches and
    // attribute queries answer with it.
    auto bad = module_errors_.find(m.getModule());
    Result<uint32_t> bytes = bad != module_errors_.end()
                                 ? Result<uint32_t>(bad->second)
                                 : backend_->registerFunction(m.getId(), m.getModule(), m.getName());
    functions_[m.getId()] = {m.getModule(), bytes ? *bytes : 0, bytes.status(), m.getName(), {}};
  }
  finish(h, s);
  return Status::ok();
}

Status Session::onVarRegister(const FrameHeader& h, wire::Request::Reader req) {
  RGPU_TRY(bulkNotExpected(h));
  auto m = req.getVarRegister();
  Status s = canRegister(m.getModule());
  if (s) vars_[m.getId()] = {m.getModule(), m.getName(), m.getSize(), 0};
  finish(h, s);
  return Status::ok();
}

Status Session::onSymbolAddress(const FrameHeader& h, wire::Request::Reader req) {
  RGPU_TRY(bulkNotExpected(h));
  auto it = vars_.find(req.getSymbolAddress().getId());
  if (it == vars_.end()) return finish(h, Status(err::kInvalidSymbol, "unknown symbol")), Status::ok();
  if (auto bad = module_errors_.find(it->second.module); bad != module_errors_.end())
    return finish(h, bad->second), Status::ok();
  auto g = backend_->globalAddress(it->second.module, it->second.name, it->second.size);
  if (!g) return finish(h, g.status()), Status::ok();
  const GlobalVar v = *g;
  // The range the program may reach through it: the variable, or the managed
  // allocation it is packed in (the client pages all of it).
  const uint64_t base = v.managed_size ? v.managed_base : v.addr, span = v.managed_size ? v.managed_size : v.size;
  if (!allocs_.find(base)) {
    Status a = allocs_.add(base, span, modules_[it->second.module], true);
    if (!a) return finish(h, a), Status::ok();
  }
  it->second.addr = v.addr;
  finish(h, Status::ok(), [v](auto& r) {
    auto sym = r.initSymbol();
    sym.setAddress(v.addr);
    sym.setSize(v.size);
    sym.setManagedBase(v.managed_base);
    sym.setManagedSize(v.managed_size);
  });
  return Status::ok();
}

Status Session::onLaunchKernel(const FrameHeader& h, wire::Request::Reader req) {
  RGPU_TRY(bulkNotExpected(h));
  auto m = req.getLaunchKernel();
  auto f = functions_.find(m.getFunction());
  StreamKey key;
  Status s = f == functions_.end() ? Status(err::kInvalidDeviceFunction, "unknown function") : f->second.unusable;
  if (s) s = checkStream(m.getStream(), key);
  auto params = m.getParams();
  if (s && params.size() != f->second.param_bytes)
    s = Status(err::kInvalidValue, "parameter block of " + std::to_string(params.size()) + " bytes; the kernel takes " +
                                       std::to_string(f->second.param_bytes));
  if (s) {
    LaunchConfig cfg;
    cfg.grid = {m.getGrid().getX(), m.getGrid().getY(), m.getGrid().getZ()};
    cfg.block = {m.getBlock().getX(), m.getBlock().getY(), m.getBlock().getZ()};
    cfg.shared_mem = m.getSharedMem();
    cfg.cooperative = m.getCooperative();
    if (m.hasCluster()) cfg.cluster = {m.getCluster().getX(), m.getCluster().getY(), m.getCluster().getZ()};
    s = backend_->launch(key, m.getFunction(), cfg, std::string(params.begin(), params.end()));
  }
  finish(h, s);
  return Status::ok();
}

Status Session::onFuncGetAttributes(const FrameHeader& h, wire::Request::Reader req) {
  RGPU_TRY(bulkNotExpected(h));
  uint32_t id = req.getFuncGetAttributes().getId();
  if (Status u = usableFunction(id); !u) return finish(h, u), Status::ok();
  auto a = backend_->functionAttributes(id);
  if (!a) return finish(h, a.status()), Status::ok();
  FunctionAttributes fa = *a;
  finish(h, Status::ok(), [fa](auto& r) {
    auto o = r.initFuncAttributes();
    o.setSharedSizeBytes(fa.shared_size);
    o.setConstSizeBytes(fa.const_size);
    o.setLocalSizeBytes(fa.local_size);
    o.setMaxThreadsPerBlock(fa.max_threads_per_block);
    o.setNumRegs(fa.num_regs);
    o.setPtxVersion(fa.ptx_version);
    o.setBinaryVersion(fa.binary_version);
    o.setMaxDynamicSharedSizeBytes(fa.max_dynamic_shared);
    o.setPreferredShmemCarveout(fa.preferred_carveout);
    o.setClusterDimMustBeSet(fa.cluster_must_be_set);
    o.setRequiredClusterWidth(fa.cluster_x);
    o.setRequiredClusterHeight(fa.cluster_y);
    o.setRequiredClusterDepth(fa.cluster_z);
    o.setNonPortableClusterSizeAllowed(fa.non_portable_cluster);
    o.setClusterSchedulingPolicyPreference(fa.cluster_policy);
  });
  return Status::ok();
}

Status Session::onFuncSetAttribute(const FrameHeader& h, wire::Request::Reader req) {
  RGPU_TRY(bulkNotExpected(h));
  auto m = req.getFuncSetAttribute();
  Status s = usableFunction(m.getId());
  if (s) s = backend_->setFunctionAttribute(m.getId(), m.getAttr(), m.getValue());
  if (s) {
    ++graph_epoch_;  // native graphs launch with the attributes they were made with
    // The last value of each attribute is what a restore sets again.
    auto& attrs = functions_[m.getId()].attributes;
    std::erase_if(attrs, [&](const auto& a) { return a.first == m.getAttr(); });
    attrs.emplace_back(m.getAttr(), m.getValue());
  }
  finish(h, s);
  return Status::ok();
}

Status Session::onOccupancy(const FrameHeader& h, wire::Request::Reader req) {
  RGPU_TRY(bulkNotExpected(h));
  auto m = req.getOccupancy();
  if (Status u = usableFunction(m.getId()); !u) return finish(h, u), Status::ok();
  auto n = backend_->occupancy(m.getId(), m.getBlockSize(), m.getDynamicSmem());
  if (!n) return finish(h, n.status()), Status::ok();
  int64_t v = *n;
  finish(h, Status::ok(), [v](auto& r) { r.setValue(v); });
  return Status::ok();
}

}  // namespace rgpu::server
