// Managed memory over the network (client/managed.h).
#include "client/managed.h"

#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "client/api_util.h"
#include "common/log.h"

namespace rgpu::client {
namespace {

constexpr uint64_t kPage = kManagedPage;
constexpr size_t kFetchBlockPages = 16;    // a fault fetches the 64 KiB block around it
constexpr size_t kMaxAheadPages = 1024;    // a sequential read fetches up to 4 MiB at once

struct sigaction g_previous;
thread_local int t_flushing = 0;  // this thread is uploading (its own calls are not device work)

uint64_t pagesOf(uint64_t size) { return (size + kPage - 1) / kPage; }

void onSegv(int sig, siginfo_t* si, void* ctx) {
  bool write = true;  // where the access kind is unknown, a write: the page is then uploaded, never lost
#if defined(__x86_64__)
  write = (static_cast<ucontext_t*>(ctx)->uc_mcontext.gregs[REG_ERR] & 2) != 0;
#endif
  if (ManagedMemory::get().handleFault(si->si_addr, write)) return;
  // Not ours: as the handler before us would have it.
  if (g_previous.sa_flags & SA_SIGINFO) {
    if (g_previous.sa_sigaction) return g_previous.sa_sigaction(sig, si, ctx);
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    return g_previous.sa_handler(sig);
  }
  signal(SIGSEGV, SIG_DFL);  // the access faults again and the process ends as it would have
}

void printStats() {
  auto s = ManagedMemory::get().stats();
  std::fprintf(stderr, "rgpu managed memory: %llu bytes to the device, %llu bytes to the host, %llu faults, %llu fetches\n",
               static_cast<unsigned long long>(s.up), static_cast<unsigned long long>(s.down),
               static_cast<unsigned long long>(s.faults), static_cast<unsigned long long>(s.fetches));
}

}  // namespace

ManagedMemory& ManagedMemory::get() {
  static auto* m = new ManagedMemory;  // never destroyed: faults may come during exit
  return *m;
}

void ManagedMemory::installHandler() {
  struct sigaction sa {};
  sa.sa_sigaction = onSegv;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;  // on the faulting thread's own stack: a fetch is a whole call
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, &g_previous);
  if (const char* v = std::getenv("RGPU_MANAGED_STATS"); v && std::strcmp(v, "1") == 0) std::atexit(printStats);
}

Result<uint32_t> ManagedMemory::ownStreamLocked(int device) {
  if (auto it = own_streams_.find(device); it != own_streams_.end()) return it->second;
  auto id = rt().newOwnStream(device);
  if (!id) return id.status();
  own_streams_[device] = *id;
  return *id;
}

bool ManagedMemory::transferring() { return t_flushing != 0; }
ManagedMemory::OwnRequests::OwnRequests() { ++t_flushing; }
ManagedMemory::OwnRequests::~OwnRequests() { --t_flushing; }

void ManagedMemory::forgetDevice(int device) {
  std::lock_guard lock(mu_);
  own_streams_.erase(device);
  for (auto it = allocs_.begin(); it != allocs_.end();) {
    if (it->second.device != device) {
      ++it;
      continue;
    }
    (void)mprotect(reinterpret_cast<void*>(it->first), it->second.pages.size() * kPage, PROT_NONE);
    by_device_.erase(it->second.device_addr);
    it = allocs_.erase(it);
  }
  count_.store(allocs_.size());
}

bool ManagedMemory::range(const void* p, size_t count, uint64_t* base, uint64_t* size) {
  std::lock_guard lock(mu_);
  uint64_t b;
  Alloc* a = findLocked(reinterpret_cast<uint64_t>(p), &b);
  if (!a || count > a->size - (reinterpret_cast<uint64_t>(p) - b)) return false;
  if (base) *base = b;
  if (size) *size = a->size;
  return true;
}

ManagedMemory::Advice ManagedMemory::advice(uint64_t base) {
  std::lock_guard lock(mu_);
  auto it = allocs_.find(base);
  return it == allocs_.end() ? Advice{} : it->second.advice;
}

void ManagedMemory::setAdvice(uint64_t base, const Advice& a) {
  std::lock_guard lock(mu_);
  if (auto it = allocs_.find(base); it != allocs_.end()) it->second.advice = a;
}

Status ManagedMemory::add(uint64_t p, uint64_t size, uint64_t server_base, uint64_t device_addr, int device,
                          bool host_has_bytes, bool initialised) {
  if (p % kPage) return Status(err::kMemoryAllocation, "managed memory must start on a page");
  // The host side is the reservation of the device range (or the program's registered pages): it must be there.
  if (mprotect(reinterpret_cast<void*>(p), pagesOf(size) * kPage, host_has_bytes ? PROT_READ | PROT_WRITE : PROT_NONE) != 0)
    return Status(err::kMemoryAllocation, "this process could not reserve the managed range at " + std::to_string(p) +
                                              " (" + std::strerror(errno) + ")");
  std::lock_guard lock(mu_);
  static std::once_flag once;
  std::call_once(once, [this] { installHandler(); });
  Alloc a;
  a.device = device;
  a.device_addr = device_addr ? device_addr : p;
  a.server_base = server_base;
  if (a.device_addr != p) by_device_[a.device_addr] = p;
  a.size = size;
  a.pages.assign(pagesOf(size), host_has_bytes ? kDirty : kNone);
  a.fresh = !initialised;
  a.host_pages = host_has_bytes;
  if (host_has_bytes) any_host_.store(true);
  const bool fresh = a.fresh;
  allocs_[p] = std::move(a);
  count_.store(allocs_.size());
  if (fresh) any_fresh_.store(true);
  return Status::ok();
}

uint64_t ManagedMemory::remove(uint64_t p, bool give_back) {
  std::lock_guard lock(mu_);
  auto it = allocs_.find(p);
  if (it == allocs_.end()) return 0;
  if (give_back) {
    Status s = fetchLocked(p, it->second, 0, it->second.pages.size());
    if (!s) RGPU_LOG_WARN("unregistering mapped memory at {}: the device's bytes could not be fetched: {}", p, s.message());
  }
  (void)mprotect(reinterpret_cast<void*>(p), it->second.pages.size() * kPage,
                 give_back ? PROT_READ | PROT_WRITE : PROT_NONE);
  uint64_t base = it->second.server_base;
  by_device_.erase(it->second.device_addr);
  allocs_.erase(it);
  count_.store(allocs_.size());
  return base;
}

bool ManagedMemory::contains(const void* p) {
  if (count_.load(std::memory_order_relaxed) == 0) return false;
  std::lock_guard lock(mu_);
  uint64_t base;
  return findLocked(reinterpret_cast<uint64_t>(p), &base) != nullptr;
}

ManagedMemory::Alloc* ManagedMemory::findLocked(uint64_t p, uint64_t* base) {
  auto it = allocs_.upper_bound(p);
  if (it == allocs_.begin()) return nullptr;
  --it;
  if (p - it->first >= it->second.pages.size() * kPage) return nullptr;
  *base = it->first;
  return &it->second;
}

ManagedMemory::Stats ManagedMemory::stats() {
  return {up_.load(), down_.load(), faults_.load(), fetches_.load()};
}

Status ManagedMemory::fetchLocked(uint64_t base, Alloc& a, size_t first, size_t last) {
  for (size_t i = first; i < last;) {
    if (a.pages[i] != kNone) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < last && a.pages[j] == kNone) ++j;
    const uint64_t off = i * kPage, span = (j - i) * kPage;
    const uint64_t n = std::min<uint64_t>(span, a.size - off);  // the device allocation's bytes
    void* at = reinterpret_cast<void*>(base + off);
    if (a.fresh) {
      // Never given to the device since it was made: zeros on both sides (the pages were never written here).
      if (mprotect(at, span, PROT_READ) != 0) return Status(err::kUnknown, "mprotect failed");
    } else {
      std::vector<uint8_t> bytes(n);
      auto stream = ownStreamLocked(a.device);  // a fetch waits for no stream of the program's
      if (!stream) return stream.status();
      common::CallMessage msg(64);
      auto m = msg.initRoot<wire::Request>().initMemcpyDtoH();
      m.setSrc(a.device_addr + off);
      m.setSize(n);
      setStream(m.initStream(), {*stream, a.device});
      ++t_flushing;  // a fetch is not device work: host copies stay
      auto r = rt().call(msg, nullptr, 0, bytes.data(), n);
      --t_flushing;
      if (!r) return r.status();
      // Filled out of sight and then moved over the range in one step: another
      // thread never reads these pages half-filled (it faults, and waits here).
      void* fresh = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (fresh == MAP_FAILED) return Status(err::kMemoryAllocation, "no memory for the fetched pages");
      std::memcpy(fresh, bytes.data(), n);
      if (mprotect(fresh, span, PROT_READ) != 0 ||
          mremap(fresh, span, span, MREMAP_MAYMOVE | MREMAP_FIXED, at) == MAP_FAILED) {
        munmap(fresh, span);
        return Status(err::kUnknown, std::string("cannot place the fetched pages: ") + std::strerror(errno));
      }
      down_ += n;
      ++fetches_;
    }
    for (size_t k = i; k < j; ++k) a.pages[k] = kClean;
    a.host_pages = true;
    any_host_.store(true);
    i = j;
  }
  return Status::ok();
}

bool ManagedMemory::handleFault(void* addr, bool write) {
  if (count_.load() == 0) return false;
  std::lock_guard lock(mu_);
  uint64_t base;
  Alloc* a = findLocked(reinterpret_cast<uint64_t>(addr), &base);
  if (!a) return false;
  ++faults_;
  const size_t page = (reinterpret_cast<uint64_t>(addr) - base) / kPage;
  if (a->pages[page] == kNone) {
    size_t first;
    if (page == a->next_fault) {  // reading on from the last fetch
      a->ahead = std::min(a->ahead * 2, kMaxAheadPages);
      first = page;
    } else {
      a->ahead = kFetchBlockPages;
      first = page / kFetchBlockPages * kFetchBlockPages;
    }
    const size_t last = std::min(a->pages.size(), first + a->ahead);
    a->next_fault = last;
    if (Status s = fetchLocked(base, *a, first, last); !s) {
      // The bytes cannot be had (the server is gone): the program cannot go on reading them.
      std::fprintf(stderr, "rgpu: managed memory at %p could not be fetched: %s\n", addr, s.message().c_str());
      std::abort();
    }
  }
  void* at = reinterpret_cast<void*>(base + page * kPage);
  if (write && a->pages[page] == kClean) {
    (void)mprotect(at, kPage, PROT_READ | PROT_WRITE);
    a->pages[page] = kDirty;
  } else if (a->pages[page] == kDirty) {
    (void)mprotect(at, kPage, PROT_READ | PROT_WRITE);  // (another thread's fault made it so meanwhile)
  } else if (!write) {
    (void)mprotect(at, kPage, PROT_READ);
  }
  return true;
}

Status ManagedMemory::beforeDeviceWork() {
  if (t_flushing || (!any_host_.load() && !any_fresh_.load())) return Status::ok();
  std::lock_guard lock(mu_);
  any_fresh_.store(false);
  ++t_flushing;
  Status st;
  for (auto& [base, a] : allocs_) {
    a.fresh = false;  // the device may write it from now on
    if (!a.host_pages) continue;
    for (size_t i = 0; i < a.pages.size() && st;) {
      if (a.pages[i] != kDirty) {
        ++i;
        continue;
      }
      size_t j = i;
      while (j < a.pages.size() && a.pages[j] == kDirty && (j - i) * kPage < protocol::kMaxBulkBytes) ++j;
      const uint64_t off = i * kPage, n = std::min<uint64_t>((j - i) * kPage, a.size - off);
      auto stream = ownStreamLocked(a.device);
      if (!stream) {
        st = stream.status();
        break;
      }
      common::CallMessage msg(64);
      auto m = msg.initRoot<wire::Request>().initMemcpyHtoD();
      m.setDst(a.device_addr + off);
      m.setSize(n);
      setStream(m.initStream(), {*stream, a.device});
      // Synchronous: once it returns, work on any stream sees the bytes. (The
      // program may not touch managed memory while device work runs, so no
      // earlier work still reads what this overwrites.)
      auto r = rt().call(msg, reinterpret_cast<const void*>(base + off), n);
      if (!r) st = r.status();
      else up_ += n;
      i = j;
    }
    (void)mprotect(reinterpret_cast<void*>(base), a.pages.size() * kPage, PROT_NONE);
    std::fill(a.pages.begin(), a.pages.end(), kNone);
    a.host_pages = false;
  }
  any_host_.store(false);
  --t_flushing;
  return st;
}

Status ManagedMemory::prefetchToHost(uint64_t p, uint64_t size) {
  std::lock_guard lock(mu_);
  uint64_t base;
  Alloc* a = findLocked(p, &base);
  if (!a) return Status::ok();
  const size_t first = (p - base) / kPage, last = std::min(a->pages.size(), pagesOf(p - base + size));
  return fetchLocked(base, *a, first, last);
}

const void* ManagedMemory::deviceSide(const void* p) {
  if (count_.load(std::memory_order_relaxed) == 0) return p;
  std::lock_guard lock(mu_);
  uint64_t base;
  Alloc* a = findLocked(reinterpret_cast<uint64_t>(p), &base);
  return a ? reinterpret_cast<const void*>(a->device_addr + (reinterpret_cast<uint64_t>(p) - base)) : p;
}

bool ManagedMemory::mappedDevice(const void* p) { return hostSide(p) != 0; }

uint64_t ManagedMemory::hostSide(const void* p) {
  if (count_.load(std::memory_order_relaxed) == 0) return 0;
  std::lock_guard lock(mu_);
  auto it = by_device_.upper_bound(reinterpret_cast<uint64_t>(p));
  if (it == by_device_.begin()) return 0;
  --it;
  auto a = allocs_.find(it->second);
  if (a == allocs_.end() || reinterpret_cast<uint64_t>(p) - it->first >= a->second.pages.size() * kPage) return 0;
  return it->second + (reinterpret_cast<uint64_t>(p) - it->first);
}

cudaMemcpyKind effectiveKind(void* dst, const void* src, cudaMemcpyKind kind) {
  auto& m = ManagedMemory::get();
  bool dd = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  bool sd = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if (kind != cudaMemcpyHostToHost && kind != cudaMemcpyHostToDevice && kind != cudaMemcpyDeviceToHost &&
      kind != cudaMemcpyDeviceToDevice)
    return kind;
  if (!dd && (m.contains(dst) || m.mappedDevice(dst))) dd = true;
  if (!sd && (m.contains(src) || m.mappedDevice(src))) sd = true;
  return sd ? (dd ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost)
            : (dd ? cudaMemcpyHostToDevice : cudaMemcpyHostToHost);
}

}  // namespace rgpu::client
