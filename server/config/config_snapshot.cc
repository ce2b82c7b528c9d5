#include "server/config/config_snapshot.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace rgpu::server {
namespace {

constexpr char kMagic[8] = {'r', 'g', 'p', 'u', 'c', 'f', 'g', '1'};
// A snapshot is a config file and three PEM bundles.
constexpr uint64_t kMaxSnapshotBytes = 64ull << 20;

void put(std::string& out, const std::string& field) {
  uint64_t n = field.size();
  out.append(reinterpret_cast<const char*>(&n), sizeof n);
  out += field;
}

bool get(const std::string& in, size_t& at, std::string& field) {
  uint64_t n = 0;
  if (in.size() - at < sizeof n) return false;
  std::memcpy(&n, in.data() + at, sizeof n);
  at += sizeof n;
  if (n > in.size() - at) return false;
  field.assign(in, at, n);
  at += n;
  return true;
}

}  // namespace

common::TlsOptions serverTlsOptions(const ServerConfig& cfg) {
  common::TlsOptions o;
  o.cert_file = cfg.tls_cert;
  o.key_file = cfg.tls_key;
  o.ca_file = cfg.tls_ca;
  o.require_client_cert = cfg.require_client_cert;
  return o;
}

Result<ConfigSnapshot> ConfigSnapshot::take(const std::string& path, const ServerConfig& defaults) {
  ConfigSnapshot s;
  s.path = path;
  if (path.empty()) {
    s.config = defaults;
  } else {
    auto text = common::readTextFile(path);
    if (!text) return text.status();
    s.text = std::move(*text);
    auto c = parseServerConfig(s.text, path);
    if (!c) return c.status();
    s.config = std::move(*c);
  }
  s.tls = serverTlsOptions(s.config);
  if (!s.config.insecure_plaintext) {
    RGPU_TRY(common::loadPemFiles(s.tls));
    auto ctx = common::TlsContext::makeServer(s.tls);
    if (!ctx) return ctx.status();
  }
  return s;
}

Result<int> ConfigSnapshot::toMemfd() const {
  std::string out(kMagic, sizeof kMagic);
  // Workers get the users' token digests, never the tokens.
  std::string digested = text;
  if (!text.empty()) {
    auto d = withTokensDigested(text, path.empty() ? "server.toml" : path);
    if (!d) return d.status();
    digested = std::move(*d);
  }
  for (const std::string* f : {&path, static_cast<const std::string*>(&digested), &tls.cert_pem, &tls.key_pem, &tls.ca_pem})
    put(out, *f);
  int fd = memfd_create("rgpu-config", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return Status(err::kUnknown, std::string("memfd_create: ") + std::strerror(errno));
  size_t at = 0;
  while (at < out.size()) {
    ssize_t n = ::write(fd, out.data() + at, out.size() - at);
    if (n <= 0) {
      ::close(fd);
      return Status(err::kUnknown, std::string("writing the config snapshot: ") + std::strerror(errno));
    }
    at += static_cast<size_t>(n);
  }
  fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL);
  return fd;
}

Result<ConfigSnapshot> ConfigSnapshot::fromFd(int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(sizeof kMagic) ||
      static_cast<uint64_t>(st.st_size) > kMaxSnapshotBytes)
    return Status(err::kInvalidValue, "the config snapshot from the daemon is unreadable");
  std::string in(static_cast<size_t>(st.st_size), '\0');
  size_t at = 0;
  while (at < in.size()) {
    ssize_t n = ::pread(fd, in.data() + at, in.size() - at, static_cast<off_t>(at));
    if (n <= 0) return Status(err::kInvalidValue, "the config snapshot from the daemon is truncated");
    at += static_cast<size_t>(n);
  }
  // It holds the server's private key: no copy outlives this function but the one in s.tls.
  struct Wipe {
    std::string& s;
    ~Wipe() { common::wipeSecret(s); }
  } wipe{in};
  if (std::memcmp(in.data(), kMagic, sizeof kMagic) != 0)
    return Status(err::kInvalidValue, "the config snapshot from the daemon has a bad header");
  ConfigSnapshot s;
  at = sizeof kMagic;
  std::string cert, key, ca;
  if (!get(in, at, s.path) || !get(in, at, s.text) || !get(in, at, cert) || !get(in, at, key) || !get(in, at, ca))
    return Status(err::kInvalidValue, "the config snapshot from the daemon is truncated");
  if (s.path.empty()) {
    s.config.sim_devices.push_back({});
  } else {
    auto c = parseServerConfig(s.text, s.path);
    if (!c) return c.status();
    s.config = std::move(*c);
  }
  s.tls = serverTlsOptions(s.config);
  s.tls.cert_pem = std::move(cert);
  s.tls.key_pem = std::move(key);
  s.tls.ca_pem = std::move(ca);
  return s;
}

}  // namespace rgpu::server
