#include "server/daemon/backend_factory.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <sstream>

#include "common/log.h"
#include "server/cuda/cuda_backend.h"
#include "server/cuda/driver_api.h"
#include "server/backend/device_props.h"
#include "server/sim/sim_backend.h"

namespace rgpu::server {
namespace {

// cuInit on a large GPU host can take seconds; a driver that hangs must not hang the daemon.
constexpr auto kProbeTimeout = std::chrono::seconds(60);

Result<std::unique_ptr<Backend>> makeSim(const ServerConfig& cfg, const std::vector<int>& physical,
                                         uint32_t address_window) {
  SimOptions opts;
  opts.address_window = address_window;
  opts.launch_log = cfg.sim_launch_log;
  opts.hot_paths = cfg.sim_hot_paths;
  opts.jit = cfg.sim_jit;
  opts.jit_threshold = cfg.sim_jit_threshold;
  opts.jit_library = cfg.sim_jit_library;
  opts.kernel_timeout_ms = cfg.limits.kernel_timeout_ms;
  opts.max_interpreter_bytes = cfg.limits.max_interpreter_bytes;
  std::vector<SimDeviceConfig> devices;
  for (int p : physical) {
    if (p < 0 || static_cast<size_t>(p) >= cfg.sim_devices.size())
      return Status(err::kInvalidDevice, "sim device " + std::to_string(p) + " is not configured");
    devices.push_back(cfg.sim_devices[p]);
  }
  if (physical.empty()) devices = cfg.sim_devices;
  opts.physical = physical;
  return std::unique_ptr<Backend>(std::make_unique<SimBackend>(devices, opts));
}

Result<std::unique_ptr<Backend>> makeCuda(const ServerConfig& cfg, const std::vector<int>& physical,
                                          uint32_t address_window) {
  cuda::CudaOptions o;
  o.devices = physical;
  o.address_window = address_window;
  o.fixed_addresses = !cfg.checkpoint_dir.empty();
  o.driver_library = cfg.cuda_driver_library;
  o.staging_pool_bytes = cfg.cuda_staging_pool;
  o.scrub = cfg.cuda_scrub;
  o.kernel_timeout_ms = cfg.limits.kernel_timeout_ms;
  o.cublas_library = cfg.cublas_library;
  o.cublaslt_library = cfg.cublaslt_library;
  o.cufft_library = cfg.cufft_library;
  o.cusolver_library = cfg.cusolver_library;
  o.cusparse_library = cfg.cusparse_library;
  o.cudnn_library = cfg.cudnn_library;
  o.capture_stdout = true;  // workers only build backends here; device printf goes to the client
  auto b = cuda::CudaBackend::create(o);
  if (!b) return b.status();
  return std::unique_ptr<Backend>(std::move(*b));
}

}  // namespace

int runCudaProbe(const ServerConfig& cfg) {
  auto fail = [](const Status& s) {
    std::printf("error %d %s\n", s.code(), s.message().c_str());
    return 1;
  };
  auto loaded = cuda::DriverApi::load(cfg.cuda_driver_library);
  if (!loaded) return fail(loaded.status());
  cuda::DriverApi& api = **loaded;
  CUresult r = api.cuInit(0);
  if (r == CUDA_ERROR_NO_DEVICE) return fail(Status(err::kNoDevice, "the CUDA driver sees no GPU"));
  if (Status s = api.check(r, "cuInit", __FILE__, __LINE__); !s) return fail(s);
  int version = 0, count = 0;
  if (Status s = RGPU_CU(cuDriverGetVersion(&version)); !s) return fail(s);
  if (Status s = RGPU_CU(cuDeviceGetCount(&count)); !s) return fail(s);
  if (count <= 0) return fail(Status(err::kNoDevice, "the CUDA driver sees no GPU"));
  std::printf("driver %d\n", version);
  for (int i = 0; i < count; ++i) {
    CUdevice d = 0;
    char name[256] = {};
    if (api.cuDeviceGet(&d, i) != CUDA_SUCCESS || api.cuDeviceGetName(name, sizeof name - 1, d) != CUDA_SUCCESS)
      std::snprintf(name, sizeof name, "device %d", i);
    size_t total = 0;
    int major = 0, minor = 0, sms = 0;
    CUuuid uuid{};
    (void)api.cuDeviceTotalMem(&total, d);
    (void)api.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d);
    (void)api.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d);
    (void)api.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d);
    (void)api.cuDeviceGetUuid(&uuid, d);
    // One line per GPU: "device <bytes> <major*10+minor> <SMs> <uuid> <name>" (tab-separated; the name may hold spaces).
    std::printf("device\t%zu\t%d\t%d\t%s\t%s\n", total, major * 10 + minor, sms,
                uuidText(std::string(uuid.bytes, 16)).c_str(), name);
  }
  std::fflush(stdout);
  return 0;
}

CudaProbe probeCuda(const std::string& exe, const std::string& config_path, const ServerConfig& cfg) {
  CudaProbe out;
  int fds[2];
  if (::pipe(fds) != 0) {
    out.status = Status(err::kUnknown, std::string("probe: pipe: ") + std::strerror(errno));
    return out;
  }
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], 1);
    ::close(fds[0]);
    ::close(fds[1]);
    std::vector<std::string> args = {"rgpu-server", "--probe-cuda", "--log-level", "off"};
    if (!config_path.empty()) args.insert(args.end(), {"--config", config_path});
    args.insert(args.end(), {"--cuda-driver", cfg.cuda_driver_library});
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(exe.c_str(), argv.data());
    _exit(127);
  }
  ::close(fds[1]);
  if (pid < 0) {
    ::close(fds[0]);
    out.status = Status(err::kUnknown, std::string("probe: fork: ") + std::strerror(errno));
    return out;
  }
  std::string text;
  auto deadline = std::chrono::steady_clock::now() + kProbeTimeout;
  bool timed_out = false;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char buf[4096];
    ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n <= 0) break;
    if (text.size() < 64 * 1024) text.append(buf, n);
  }
  ::close(fds[0]);
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (timed_out) {
    out.status = Status(err::kSystemNotReady, "the CUDA driver did not initialise within " +
                                                  std::to_string(kProbeTimeout.count()) + " s");
    return out;
  }
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("driver ", 0) == 0) out.driver_version = std::atoi(line.c_str() + 7);
    else if (line.rfind("device\t", 0) == 0) {
      std::istringstream f(line.substr(7));
      PoolDeviceInfo d;
      std::string total, cc, sms;
      std::getline(f, total, '\t');
      std::getline(f, cc, '\t');
      std::getline(f, sms, '\t');
      std::getline(f, d.uuid, '\t');
      std::getline(f, d.name);
      d.total = std::strtoull(total.c_str(), nullptr, 10);
      d.cc = static_cast<uint32_t>(std::atoi(cc.c_str()));
      d.sms = static_cast<uint32_t>(std::atoi(sms.c_str()));
      out.inventory.push_back(std::move(d));
    }
    else if (line.rfind("error ", 0) == 0) {
      char* end = nullptr;
      long code = std::strtol(line.c_str() + 6, &end, 10);
      out.status = Status(static_cast<int>(code), end && *end ? std::string(end + 1) : "CUDA probe failed");
    }
  }
  if (out.status && out.inventory.empty())
    out.status = Status(err::kNoDevice, "the CUDA probe ended without a report (exit status " +
                                            std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) + ")");
  return out;
}

bool mpsDaemonRunning() {
  const char* dir = std::getenv("CUDA_MPS_PIPE_DIRECTORY");
  std::string control = std::string(dir && *dir ? dir : "/tmp/nvidia-mps") + "/control";
  return ::access(control.c_str(), F_OK) == 0;
}

std::string uuidText(const std::string& b) {
  std::string out = "GPU-";
  char hex[3];
  for (size_t i = 0; i < b.size() && i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    std::snprintf(hex, sizeof hex, "%02x", static_cast<unsigned char>(b[i]));
    out += hex;
  }
  return out;
}

std::vector<PoolDeviceInfo> simInventory(const ServerConfig& cfg) {
  std::vector<PoolDeviceInfo> out;
  for (size_t i = 0; i < cfg.sim_devices.size(); ++i) {
    DeviceDescription d = describeSimDevice(cfg.sim_devices[i], static_cast<int>(i));
    out.push_back({d.name, uuidText(d.uuid), d.total_mem, static_cast<uint32_t>(d.major * 10 + d.minor),
                   static_cast<uint32_t>(cfg.sim_devices[i].sm_count)});
  }
  return out;
}

Result<BackendChoice> chooseBackend(const ServerConfig& cfg, const std::string& exe, const std::string& config_path) {
  if (cfg.backend == "sim") return BackendChoice{"sim", simInventory(cfg)};
  CudaProbe p = probeCuda(exe, config_path, cfg);
  if (p.status) {
    std::string names;
    for (auto& d : p.inventory) names += (names.empty() ? "" : ", ") + d.name;
    RGPU_LOG_INFO("backend = \"{}\": CUDA driver {} ({}) with {} GPU(s): {}", cfg.backend, p.driver_version,
                  cfg.cuda_driver_library, p.inventory.size(), names);
    return BackendChoice{"cuda", p.inventory};
  }
  if (cfg.backend == "cuda")
    return Status(p.status.code(), "backend = \"cuda\", but no GPU is usable: " + p.status.message());
  RGPU_LOG_INFO("backend = \"auto\": using the sim backend, because {}", p.status.message());
  return BackendChoice{"sim", simInventory(cfg)};
}

Result<std::unique_ptr<Backend>> makeBackend(const ServerConfig& cfg, const std::vector<int>& physical,
                                             uint32_t address_window) {
  if (cfg.backend == "cuda") return makeCuda(cfg, physical, address_window);
  if (cfg.backend == "auto") {
    auto b = makeCuda(cfg, physical, address_window);
    if (b) return b;
    common::logOnce("backend-auto", "backend = \"auto\": using the sim backend, because " + b.status().message());
  }
  return makeSim(cfg, physical, address_window);
}

}  // namespace rgpu::server
