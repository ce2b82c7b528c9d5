#include "common/tls.h"

#include "common/spin.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <malloc.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <thread>

namespace rgpu::common {
namespace {

using Clock = std::chrono::steady_clock;

std::string opensslError() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? "unknown TLS error" : out;
}

Status tlsFail(const std::string& what) {
  return Status(err::kDevicesUnavailable, what + ": " + opensslError());
}

// A socket BIO whose writes never raise SIGPIPE: a library must not kill its
// host program because a server went away, nor change the program's handler.
int sendNoSignal(BIO* bio, const char* data, int len) {
  int fd = -1;
  BIO_get_fd(bio, &fd);
  BIO_clear_retry_flags(bio);
  ssize_t n = ::send(fd, data, static_cast<size_t>(len), MSG_NOSIGNAL);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) BIO_set_retry_write(bio);
  return static_cast<int>(n);
}

BIO_METHOD* noSigpipeMethod() {
  static BIO_METHOD* method = [] {
    const BIO_METHOD* base = BIO_s_socket();
    BIO_METHOD* m = BIO_meth_new(BIO_TYPE_SOCKET, "rgpu socket");
    BIO_meth_set_write(m, sendNoSignal);
    BIO_meth_set_read(m, BIO_meth_get_read(base));
    BIO_meth_set_puts(m, BIO_meth_get_puts(base));
    BIO_meth_set_ctrl(m, BIO_meth_get_ctrl(base));
    BIO_meth_set_create(m, BIO_meth_get_create(base));
    BIO_meth_set_destroy(m, BIO_meth_get_destroy(base));
    return m;
  }();
  return method;
}

void attachSocket(SSL* ssl, int fd) {
  BIO* bio = BIO_new(noSigpipeMethod());
  BIO_set_fd(bio, fd, BIO_NOCLOSE);
  SSL_set_bio(ssl, bio, bio);
}

int remainingMs(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left < 0 ? 0 : static_cast<int>(left);
}

// PEM text -> OpenSSL objects (for material the daemon read and validated).
struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
std::unique_ptr<BIO, BioFree> memBio(const std::string& pem) {
  return std::unique_ptr<BIO, BioFree>(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

bool useCertificateChainPem(SSL_CTX* ctx, const std::string& pem) {
  auto bio = memBio(pem);
  X509* leaf = PEM_read_bio_X509_AUX(bio.get(), nullptr, nullptr, nullptr);
  if (!leaf) return false;
  bool ok = SSL_CTX_use_certificate(ctx, leaf) == 1;
  X509_free(leaf);
  SSL_CTX_clear_chain_certs(ctx);
  while (ok) {
    X509* ca = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr);
    if (!ca) break;
    if (SSL_CTX_add0_chain_cert(ctx, ca) != 1) {
      X509_free(ca);
      ok = false;
    }
  }
  ERR_clear_error();  // the end of the chain reads as "no start line"
  return ok;
}

bool usePrivateKeyPem(SSL_CTX* ctx, const std::string& pem) {
  auto bio = memBio(pem);
  EVP_PKEY* key = PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr);
  if (!key) return false;
  bool ok = SSL_CTX_use_PrivateKey(ctx, key) == 1;
  EVP_PKEY_free(key);
  return ok;
}

// Adds every certificate of a CA bundle to the verify store (and, on a server,
// to the list of CAs it names to clients). Returns how many.
int loadCaPem(SSL_CTX* ctx, const std::string& pem, bool server) {
  auto bio = memBio(pem);
  X509_STORE* store = SSL_CTX_get_cert_store(ctx);
  int n = 0;
  while (X509* ca = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    if (X509_STORE_add_cert(store, ca) == 1) ++n;
    if (server) SSL_CTX_add_client_CA(ctx, ca);
    X509_free(ca);
  }
  ERR_clear_error();
  return n;
}

// The resume PSK for a cipher suite: HMAC(secret) with the suite's hash, as
// long as that hash (RFC 8446 requires a PSK to match its suite's hash).
SSL_SESSION* resumePskSession(const SSL_CIPHER* cipher, const std::string& secret) {
  const EVP_MD* md = cipher ? SSL_CIPHER_get_handshake_digest(cipher) : nullptr;
  if (!md) return nullptr;
  static const char kLabel[] = "rgpu resume psk v1";
  unsigned char key[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (!HMAC(md, secret.data(), static_cast<int>(secret.size()), reinterpret_cast<const unsigned char*>(kLabel),
            sizeof kLabel - 1, key, &len))
    return nullptr;
  SSL_SESSION* s = SSL_SESSION_new();
  bool ok = s && SSL_SESSION_set1_master_key(s, key, len) == 1 && SSL_SESSION_set_cipher(s, cipher) == 1 &&
            SSL_SESSION_set_protocol_version(s, TLS1_3_VERSION) == 1;
  OPENSSL_cleanse(key, sizeof key);
  if (!ok) {
    SSL_SESSION_free(s);
    return nullptr;
  }
  return s;
}

// The suite a resuming client asks for (and the server, following the
// client's order, picks): its PSK is built for it.
constexpr char kResumeSuite[] = "TLS_AES_256_GCM_SHA384";
const SSL_CIPHER* resumeCipher(SSL* ssl) {
  static const unsigned char kId[] = {0x13, 0x02};
  return SSL_CIPHER_find(ssl, kId);
}

// Client: offers the session's resume PSK (the secret rides in app data for
// the length of connect()).
int offerResumePsk(SSL* ssl, const EVP_MD* md, const unsigned char** id, size_t* id_len, SSL_SESSION** sess) {
  *sess = nullptr;
  auto* secret = static_cast<const std::string*>(SSL_get_app_data(ssl));
  const SSL_CIPHER* cipher = resumeCipher(ssl);
  if (!secret || secret->empty() || !cipher) return 1;
  if (md && EVP_MD_get_type(md) != EVP_MD_get_type(SSL_CIPHER_get_handshake_digest(cipher))) return 1;
  *sess = resumePskSession(cipher, *secret);
  *id = reinterpret_cast<const unsigned char*>(kResumePskIdentity);
  *id_len = sizeof kResumePskIdentity - 1;
  return 1;
}

const EVP_MD* signatureDigest(EVP_PKEY* key) {
  int id = EVP_PKEY_get_base_id(key);
  return id == EVP_PKEY_ED25519 || id == EVP_PKEY_ED448 ? nullptr : EVP_sha256();
}
bool usePss(EVP_PKEY* key, EVP_PKEY_CTX* pctx) {
  if (EVP_PKEY_get_base_id(key) != EVP_PKEY_RSA) return true;
  return EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PSS_PADDING) > 0 &&
         EVP_PKEY_CTX_set_rsa_pss_saltlen(pctx, RSA_PSS_SALTLEN_DIGEST) > 0;
}

Result<SSL_CTX*> baseContext(bool server, const TlsOptions& opts) {
  SSL_CTX* ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
  if (!ctx) return tlsFail("SSL_CTX_new");
  // TLS 1.3 only: no downgrade to protocols with weaker handshakes.
  SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
  SSL_CTX_set_mode(ctx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  // Pull whole records (and whatever follows) in one read(): a frame is read
  // as header then message, and each read() is a syscall.
  SSL_CTX_set_read_ahead(ctx, 1);
  auto fail = [&](const std::string& what) -> Status {
    Status s = tlsFail(what);
    SSL_CTX_free(ctx);
    return s;
  };
  std::string cert_name = opts.cert_file.empty() ? "the certificate" : opts.cert_file;
  if (server) {
    // The server's certificate and key stay with its TlsContext (tls.h).
  } else if (!opts.cert_pem.empty()) {
    if (!useCertificateChainPem(ctx, opts.cert_pem)) return fail("cannot load certificate " + cert_name);
    if (!usePrivateKeyPem(ctx, opts.key_pem)) return fail("cannot load private key " + opts.key_file);
    if (SSL_CTX_check_private_key(ctx) != 1) return fail("key does not match " + cert_name);
  } else if (!opts.cert_file.empty()) {
    if (SSL_CTX_use_certificate_chain_file(ctx, opts.cert_file.c_str()) != 1)
      return fail("cannot load certificate " + opts.cert_file);
    if (SSL_CTX_use_PrivateKey_file(ctx, opts.key_file.c_str(), SSL_FILETYPE_PEM) != 1)
      return fail("cannot load private key " + opts.key_file);
    if (SSL_CTX_check_private_key(ctx) != 1) return fail("key does not match " + opts.cert_file);
  }
  if (!opts.ca_pem.empty()) {
    if (loadCaPem(ctx, opts.ca_pem, server) == 0) return fail("cannot load CA " + opts.ca_file);
  } else if (!opts.ca_file.empty()) {
    if (SSL_CTX_load_verify_locations(ctx, opts.ca_file.c_str(), nullptr) != 1)
      return fail("cannot load CA " + opts.ca_file);
    if (server) {
      STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(opts.ca_file.c_str());
      if (names) SSL_CTX_set_client_CA_list(ctx, names);
    }
  } else if (!server) {
    SSL_CTX_set_default_verify_paths(ctx);
  }
  return ctx;
}

Status readWholeFile(const std::string& path, std::string& out) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return Status(err::kFileNotFound, "cannot read " + path + ": " + std::strerror(errno));
  out.clear();
  char buf[8192];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) {
    out.append(buf, n);
    // Certificates and keys are small; a huge file is a mistake, not a bundle.
    if (out.size() > (16u << 20)) {
      std::fclose(f);
      return Status(err::kInvalidValue, path + " is larger than 16 MiB: not a PEM bundle");
    }
  }
  std::fclose(f);
  return Status::ok();
}

}  // namespace

namespace {
void* allocate(size_t n, const char*, int) { return std::malloc(n); }
void release(void* p, const char*, int) {
  if (!p) return;
  explicit_bzero(p, malloc_usable_size(p));
  std::free(p);
}
void* reallocate(void* p, size_t n, const char* file, int line) {
  if (!p) return allocate(n, file, line);
  if (n == 0) {
    release(p, file, line);
    return nullptr;
  }
  size_t old = malloc_usable_size(p);
  void* q = std::malloc(n);
  if (!q) return nullptr;
  std::memcpy(q, p, std::min(old, n));
  release(p, file, line);
  return q;
}
}  // namespace

bool clearOpenSslMemoryOnFree() { return CRYPTO_set_mem_functions(allocate, reallocate, release) == 1; }

void wipeSecret(std::string& s) {
  s.resize(s.capacity());  // the bytes past size() may hold an earlier copy
  OPENSSL_cleanse(s.data(), s.size());
  s.clear();
  s.shrink_to_fit();
}

Result<std::unique_ptr<TlsContext>> TlsContext::makeServer(const TlsOptions& opts) {
  // The certificate chain and key: the PEM text the daemon validated, else the files.
  std::string cert_text, key_text;
  const std::string* cert = &opts.cert_pem;
  const std::string* key = &opts.key_pem;
  if (opts.cert_pem.empty()) {
    if (opts.cert_file.empty()) return Status(err::kInvalidValue, "the server needs a TLS certificate and key");
    RGPU_TRY(readWholeFile(opts.cert_file, cert_text));
    if (Status s = readWholeFile(opts.key_file, key_text); !s) return s;
    cert = &cert_text;
    key = &key_text;
  }
  std::string cert_name = opts.cert_file.empty() ? "the certificate" : opts.cert_file;
  std::string key_name = opts.key_file.empty() ? "the private key" : opts.key_file;
  auto cb = memBio(*cert);
  X509* leaf = PEM_read_bio_X509_AUX(cb.get(), nullptr, nullptr, nullptr);
  STACK_OF(X509)* chain = sk_X509_new_null();
  while (X509* ca = leaf ? PEM_read_bio_X509(cb.get(), nullptr, nullptr, nullptr) : nullptr) sk_X509_push(chain, ca);
  ERR_clear_error();  // the end of the chain reads as "no start line"
  auto kb = memBio(*key);
  EVP_PKEY* pkey = PEM_read_bio_PrivateKey(kb.get(), nullptr, nullptr, nullptr);
  kb.reset();
  wipeSecret(key_text);
  auto drop = [&](Status s) {
    X509_free(leaf);
    sk_X509_pop_free(chain, X509_free);
    EVP_PKEY_free(pkey);
    return s;
  };
  if (!leaf) return drop(tlsFail("cannot load certificate " + cert_name));
  if (!pkey) return drop(tlsFail("cannot load private key " + key_name));
  if (X509_check_private_key(leaf, pkey) != 1) return drop(tlsFail("key does not match " + cert_name));
  auto ctx = baseContext(true, opts);
  if (!ctx) return drop(ctx.status());
  int mode = SSL_VERIFY_PEER | SSL_VERIFY_CLIENT_ONCE;
  if (opts.require_client_cert) mode |= SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
  SSL_CTX_set_verify(*ctx, mode, nullptr);
  // One worker process per session: resumption tickets buy nothing here (a
  // resume authenticates by the session's own PSK instead).
  SSL_CTX_set_num_tickets(*ctx, 0);
  // OpenSSL refuses to resume a verified session without a context id.
  static const unsigned char kSessionContext[] = "rgpu-server";
  SSL_CTX_set_session_id_context(*ctx, kSessionContext, sizeof kSessionContext - 1);
  std::unique_ptr<TlsContext> t(new TlsContext(*ctx, true));
  t->leaf_ = leaf;
  t->chain_ = chain;
  t->key_ = pkey;
  SSL_CTX_set_app_data(*ctx, t.get());
  SSL_CTX_set_cert_cb(*ctx, &TlsContext::lendCertificate, t.get());
  SSL_CTX_set_psk_find_session_callback(*ctx, &TlsContext::findResumePsk);
  return t;
}

int TlsContext::lendCertificate(SSL* ssl, void* self) {
  auto* t = static_cast<TlsContext*>(self);
  std::lock_guard lock(t->key_mu_);
  // Without a key the handshake can only succeed by the resume PSK.
  if (t->key_ && SSL_use_cert_and_key(ssl, t->leaf_, t->key_, t->chain_, 1) != 1) return 0;
  return 1;
}

int TlsContext::findResumePsk(SSL* ssl, const unsigned char* identity, size_t len, SSL_SESSION** session) {
  *session = nullptr;
  auto* t = static_cast<TlsContext*>(SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl)));
  if (!t || len != sizeof kResumePskIdentity - 1 || std::memcmp(identity, kResumePskIdentity, len) != 0) return 1;
  std::lock_guard lock(t->key_mu_);
  if (t->resume_secret_.empty()) return 1;
  const SSL_CIPHER* cipher = SSL_get_pending_cipher(ssl);
  *session = resumePskSession(cipher ? cipher : resumeCipher(ssl), t->resume_secret_);
  return 1;
}

void TlsContext::forgetPrivateKey() {
  std::lock_guard lock(key_mu_);
  EVP_PKEY_free(key_);  // OpenSSL clears the key's numbers as it frees them
  key_ = nullptr;
}

bool TlsContext::holdsPrivateKey() const {
  std::lock_guard lock(key_mu_);
  return key_ != nullptr;
}

void TlsContext::setResumeSecret(const std::string& secret) {
  std::lock_guard lock(key_mu_);
  wipeSecret(resume_secret_);
  resume_secret_ = secret;
}

Result<std::unique_ptr<TlsContext>> TlsContext::makeClient(const TlsOptions& opts) {
  auto ctx = baseContext(false, opts);
  if (!ctx) return ctx.status();
  SSL_CTX_set_verify(*ctx, SSL_VERIFY_PEER, nullptr);
  return std::unique_ptr<TlsContext>(new TlsContext(*ctx, false));
}

std::unique_ptr<TlsContext> TlsContext::makePlaintext(bool server) {
  return std::unique_ptr<TlsContext>(new TlsContext(nullptr, server));
}

TlsContext::~TlsContext() {
  if (ctx_) {
    SSL_CTX_set_app_data(ctx_, nullptr);  // connections may keep the SSL_CTX alive
    SSL_CTX_free(ctx_);
  }
  X509_free(leaf_);
  sk_X509_pop_free(chain_, X509_free);
  EVP_PKEY_free(key_);
  wipeSecret(resume_secret_);
}

Status loadPemFiles(TlsOptions& opts) {
  if (!opts.cert_file.empty()) RGPU_TRY(readWholeFile(opts.cert_file, opts.cert_pem));
  if (!opts.key_file.empty()) RGPU_TRY(readWholeFile(opts.key_file, opts.key_pem));
  if (!opts.ca_file.empty()) RGPU_TRY(readWholeFile(opts.ca_file, opts.ca_pem));
  return Status::ok();
}

bool isLoopbackHost(const std::string& host) {
  if (host == "localhost" || host == "::1") return true;
  in_addr a4;
  if (inet_pton(AF_INET, host.c_str(), &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
  return false;
}

void tuneSocket(int fd, int dead_after_s) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  int idle = dead_after_s > 6 ? dead_after_s / 2 : 3, intvl = 2, cnt = 3;
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
  unsigned user_timeout = static_cast<unsigned>(dead_after_s) * 1000u;
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof user_timeout);
}

Result<std::pair<std::string, uint16_t>> parseHostPort(const std::string& s) {
  std::string host, port;
  if (!s.empty() && s[0] == '[') {
    auto close = s.find(']');
    if (close == std::string::npos || close + 1 >= s.size() || s[close + 1] != ':')
      return Status(err::kInvalidValue, "bad address '" + s + "' (want [v6]:port)");
    host = s.substr(1, close - 1);
    port = s.substr(close + 2);
  } else {
    auto colon = s.rfind(':');
    if (colon == std::string::npos) return Status(err::kInvalidValue, "bad address '" + s + "' (want host:port)");
    host = s.substr(0, colon);
    port = s.substr(colon + 1);
  }
  char* end = nullptr;
  long p = std::strtol(port.c_str(), &end, 10);
  if (host.empty() || port.empty() || *end != '\0' || p < 0 || p > 65535)
    return Status(err::kInvalidValue, "bad address '" + s + "' (want host:port)");
  return std::make_pair(host, static_cast<uint16_t>(p));
}

TlsConnection::TlsConnection(int fd, SSL* ssl, std::string peer)
    : fd_(fd), wake_fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)), ssl_(ssl), peer_(std::move(peer)) {}

TlsConnection::~TlsConnection() {
  shutdown();
  if (ssl_) SSL_free(ssl_);
  ::close(fd_);
  ::close(wake_fd_);
}

Result<std::unique_ptr<TlsConnection>> TlsConnection::connect(TlsContext& ctx, const std::string& host,
                                                              uint16_t port,
                                                              const std::string& server_name,
                                                              std::chrono::milliseconds timeout,
                                                              const std::string& preamble,
                                                              const std::string& resume_secret,
                                                              bool* refused,
                                                              const std::function<void(TlsConnection*)>& handshaking) {
  auto deadline = Clock::now() + timeout;
  if (refused) *refused = false;
  bool tried = false, all_refused = true;
  std::string where = host + ":" + std::to_string(port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0)
    return Status(err::kDevicesUnavailable, "cannot resolve " + where + ": " + gai_strerror(rc));
  std::string last_error = "no addresses";
  int fd = -1;
  for (addrinfo* ai = res; ai && fd < 0; ai = ai->ai_next) {
    int s = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (s < 0) continue;
    tried = true;
    if (::connect(s, ai->ai_addr, ai->ai_addrlen) == 0 || errno == EINPROGRESS) {
      pollfd p{s, POLLOUT, 0};
      int rc = ::poll(&p, 1, remainingMs(deadline));
      int soerr = 0;
      socklen_t len = sizeof soerr;
      if (rc == 1 && getsockopt(s, SOL_SOCKET, SO_ERROR, &soerr, &len) == 0 && soerr == 0) {
        fd = s;
        break;
      }
      const int e = rc == 0 ? ETIMEDOUT : soerr ? soerr : errno;
      last_error = rc == 0 ? "timed out" : std::strerror(e);
      all_refused = all_refused && e == ECONNREFUSED;
    } else {
      all_refused = all_refused && errno == ECONNREFUSED;
      last_error = std::strerror(errno);
    }
    ::close(s);
  }
  freeaddrinfo(res);
  if (fd < 0) {
    if (refused) *refused = tried && all_refused;
    return Status(err::kDevicesUnavailable, "cannot connect to " + where + ": " + last_error);
  }
  tuneSocket(fd, 30);
  if (!preamble.empty() &&
      ::send(fd, preamble.data(), preamble.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(preamble.size())) {
    ::close(fd);  // a fresh socket takes a few bytes at once; anything else is a failure
    return Status(err::kDevicesUnavailable, "cannot write to " + where + ": " + std::strerror(errno));
  }
  if (ctx.plaintext()) return std::unique_ptr<TlsConnection>(new TlsConnection(fd, nullptr, where));

  SSL* ssl = SSL_new(ctx.native());
  attachSocket(ssl, fd);
  std::string name = server_name.empty() ? host : server_name;
  in6_addr a6;
  in_addr a4;
  if (inet_pton(AF_INET, name.c_str(), &a4) == 1 || inet_pton(AF_INET6, name.c_str(), &a6) == 1) {
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name.c_str());
  } else {
    SSL_set_tlsext_host_name(ssl, name.c_str());
    SSL_set1_host(ssl, name.c_str());
  }
  if (!resume_secret.empty()) {
    SSL_set_ciphersuites(ssl, kResumeSuite);
    SSL_set_app_data(ssl, const_cast<std::string*>(&resume_secret));
    SSL_set_psk_use_session_callback(ssl, offerResumePsk);
  }
  std::unique_ptr<TlsConnection> conn(new TlsConnection(fd, ssl, where));
  if (handshaking) handshaking(conn.get());
  Status hs = conn->handshake(false, std::chrono::milliseconds(remainingMs(deadline)));
  if (handshaking) handshaking(nullptr);
  SSL_set_app_data(ssl, nullptr);  // the secret is the caller's
  RGPU_TRY(hs);
  return conn;
}

Result<std::unique_ptr<TlsConnection>> TlsConnection::accept(TlsContext& ctx, int fd,
                                                             std::chrono::milliseconds timeout) {
  int flags = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  sockaddr_storage ss{};
  socklen_t sl = sizeof ss;
  std::string peer = "?";
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &sl) == 0) {
    char host[NI_MAXHOST], serv[NI_MAXSERV];
    if (getnameinfo(reinterpret_cast<sockaddr*>(&ss), sl, host, sizeof host, serv, sizeof serv,
                    NI_NUMERICHOST | NI_NUMERICSERV) == 0)
      peer = std::string(host) + ":" + serv;
  }
  tuneSocket(fd, 30);
  if (ctx.plaintext()) return std::unique_ptr<TlsConnection>(new TlsConnection(fd, nullptr, peer));
  SSL* ssl = SSL_new(ctx.native());
  attachSocket(ssl, fd);
  std::unique_ptr<TlsConnection> conn(new TlsConnection(fd, ssl, peer));
  Status hs = conn->handshake(true, timeout);
  // The connection keeps no reference to the server's key (tls.h).
  SSL_certs_clear(ssl);
  RGPU_TRY(hs);
  return conn;
}

Status TlsConnection::handshake(bool server, std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  for (;;) {
    ERR_clear_error();
    int rc = server ? SSL_accept(ssl_) : SSL_connect(ssl_);
    if (rc == 1) return Status::ok();
    int e = SSL_get_error(ssl_, rc);
    short ev = e == SSL_ERROR_WANT_READ ? POLLIN : e == SSL_ERROR_WANT_WRITE ? POLLOUT : 0;
    if (ev == 0) {
      std::string why = opensslError();
      long vr = SSL_get_verify_result(ssl_);
      if (vr != X509_V_OK) why += " (certificate: " + std::string(X509_verify_cert_error_string(vr)) + ")";
      return Status(err::kDevicesUnavailable, "TLS handshake with " + peer_ + " failed: " + why);
    }
    int left = remainingMs(deadline);
    if (left == 0 || !waitFor(ev, left))
      return Status(err::kDevicesUnavailable, "TLS handshake with " + peer_ +
                                                  (closed_.load() ? " cut short: the connection was shut down"
                                                                  : " timed out"));
  }
}

bool TlsConnection::waitFor(short events, int timeout_ms) {
  pollfd p[2] = {{fd_, events, 0}, {wake_fd_, POLLIN, 0}};
  for (;;) {
    if (closed_.load()) return false;
    int rc = ::poll(p, 2, timeout_ms);
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) return false;
    if (p[1].revents) return false;
    return true;  // readable/writable or error: the next SSL call reports which
  }
}

Result<size_t> TlsConnection::writeOnce(const void* src, size_t len, short& want) {
  want = 0;
  int chunk = static_cast<int>(std::min<size_t>(len, 1u << 30));
  if (!ssl_) {
    ssize_t n = ::send(fd_, src, static_cast<size_t>(chunk), MSG_NOSIGNAL);
    if (n > 0) return static_cast<size_t>(n);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      want = POLLOUT;
      return size_t{0};
    }
    closed_.store(true);
    return Status(err::kDevicesUnavailable, "write to " + peer_ + " failed: " + std::strerror(errno));
  }
  int rc, e;
  {
    std::lock_guard lock(ssl_mu_);
    ERR_clear_error();
    rc = SSL_write(ssl_, src, chunk);
    e = rc > 0 ? SSL_ERROR_NONE : SSL_get_error(ssl_, rc);
  }
  if (rc > 0) return static_cast<size_t>(rc);
  if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ) {
    want = e == SSL_ERROR_WANT_WRITE ? POLLOUT : POLLIN;
    return size_t{0};
  }
  closed_.store(true);
  return Status(err::kDevicesUnavailable, "write to " + peer_ + " failed: " +
                                              (e == SSL_ERROR_SYSCALL ? std::strerror(errno) : opensslError()));
}

Status TlsConnection::writeAll(const struct iovec* iov, int count) {
  std::lock_guard wlock(write_mu_);
  size_t total = 0;
  for (int i = 0; i < count; ++i) total += iov[i].iov_len;
  const bool timed = total >= kRateSampleBytes;
  const auto start = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  for (int i = 0; i < count; ++i) {
    auto* p = static_cast<const char*>(iov[i].iov_base);
    size_t left = iov[i].iov_len;
    while (left > 0) {
      if (closed_.load()) return Status(err::kDevicesUnavailable, "connection to " + peer_ + " is closed");
      short want = 0;
      auto n = writeOnce(p, left, want);
      if (!n) return n.status();
      if (*n > 0) {
        p += *n;
        left -= *n;
        continue;
      }
      // Without ssl_mu_ held, so the reader keeps draining the peer's data:
      // both sides blocked in write with full buffers would deadlock otherwise.
      if (!waitFor(want, -1)) return Status(err::kDevicesUnavailable, "connection to " + peer_ + " is closed");
    }
  }
  if (timed) {
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double rate = static_cast<double>(total) / std::max(secs, 1e-9), old = write_rate_.load();
    write_rate_.store(old > 0 ? 0.75 * old + 0.25 * rate : rate, std::memory_order_relaxed);
  }
  return Status::ok();
}

Result<size_t> TlsConnection::readOnce(void* dst, size_t len, short& want) {
  want = 0;
  size_t chunk = std::min<size_t>(len, 1u << 30);
  if (!ssl_) {
    ssize_t n = ::recv(fd_, dst, chunk, 0);
    if (n > 0) return static_cast<size_t>(n);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      want = POLLIN;
      return size_t{0};
    }
    closed_.store(true);
    if (n == 0) return Status(err::kDevicesUnavailable, "connection closed by " + peer_);
    return Status(err::kDevicesUnavailable, "read from " + peer_ + " failed: " + std::strerror(errno));
  }
  int rc, e;
  {
    std::lock_guard lock(ssl_mu_);
    ERR_clear_error();
    rc = SSL_read(ssl_, dst, static_cast<int>(chunk));
    e = rc > 0 ? SSL_ERROR_NONE : SSL_get_error(ssl_, rc);
  }
  if (rc > 0) return static_cast<size_t>(rc);
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
    want = e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
    return size_t{0};
  }
  closed_.store(true);
  if (e == SSL_ERROR_ZERO_RETURN) {
    clean_close_.store(true);
    return Status(err::kDevicesUnavailable, "connection closed by " + peer_);
  }
  if ((e == SSL_ERROR_SYSCALL && errno == 0) ||
      (e == SSL_ERROR_SSL && ERR_GET_REASON(ERR_peek_error()) == SSL_R_UNEXPECTED_EOF_WHILE_READING))
    return Status(err::kDevicesUnavailable, "connection dropped by " + peer_ + " (no TLS close)");
  return Status(err::kDevicesUnavailable, "read from " + peer_ + " failed: " +
                                              (e == SSL_ERROR_SYSCALL ? std::strerror(errno) : opensslError()));
}

Result<size_t> TlsConnection::readSome(void* dst, size_t len) {
  if (ahead_at_ == ahead_end_ && len < kReadAhead) {
    if (ahead_.empty()) ahead_.resize(kReadAhead);
    auto n = readWaiting(ahead_.data(), ahead_.size());
    if (!n) return n.status();
    ahead_at_ = 0;
    ahead_end_ = *n;
  }
  if (ahead_at_ < ahead_end_) {
    const size_t n = std::min(len, ahead_end_ - ahead_at_);
    std::memcpy(dst, ahead_.data() + ahead_at_, n);
    ahead_at_ += n;
    return n;
  }
  return readWaiting(dst, len);
}

Result<size_t> TlsConnection::readWaiting(void* dst, size_t len) {
  // Busy-polling is bounded: a caller waiting for a long kernel must not cost
  // a core for the whole wait.
  constexpr int kMaxSpins = 2000;
  int spins = 0;
  for (;;) {
    if (closed_.load()) return Status(err::kDevicesUnavailable, "connection to " + peer_ + " is closed");
    short want = 0;
    auto n = readOnce(dst, len, want);
    if (!n || *n > 0) return n;
    if (want == POLLIN && busy_poll_ && busy_poll_->load(std::memory_order_relaxed) > 0 && spins++ < kMaxSpins &&
        spinYield())  // (common/spin.h: a busy machine blocks at once)
      continue;
    if (!waitFor(want, -1)) return Status(err::kDevicesUnavailable, "connection to " + peer_ + " is closed");
  }
}

bool TlsConnection::buffered() {
  if (ahead_at_ < ahead_end_) return true;
  if (!ssl_) return false;
  // Not SSL_pending: with read-ahead (set above) whole records may wait in
  // OpenSSL's buffer undecrypted, and the socket then has nothing to say.
  std::lock_guard lock(ssl_mu_);
  return SSL_has_pending(ssl_) != 0;
}

bool TlsConnection::readable(int timeout_ms) {
  if (closed_.load()) return false;
  return buffered() || waitFor(POLLIN, timeout_ms);
}

bool TlsConnection::socketReadable(int timeout_ms) { return waitFor(POLLIN, timeout_ms); }

Status TlsConnection::readExact(void* dst, size_t len) {
  auto* p = static_cast<char*>(dst);
  while (len > 0) {
    auto n = readSome(p, len);
    if (!n) return n.status();
    p += *n;
    len -= *n;
  }
  return Status::ok();
}

void TlsConnection::close() {
  if (!closed_.load() && ssl_) {
    std::lock_guard wlock(write_mu_);
    std::lock_guard lock(ssl_mu_);
    ERR_clear_error();
    SSL_shutdown(ssl_);  // non-blocking: one attempt at sending close_notify
  }
  shutdown();
}

void TlsConnection::shutdown() {
  if (closed_.exchange(true)) return;
  uint64_t one = 1;
  [[maybe_unused]] auto r = ::write(wake_fd_, &one, sizeof one);
  ::shutdown(fd_, SHUT_RDWR);
}

std::string TlsConnection::peerCertificatePem() const {
  if (!ssl_ || SSL_get_verify_result(ssl_) != X509_V_OK) return {};
  X509* cert = SSL_get1_peer_certificate(ssl_);
  if (!cert) return {};
  BIO* bio = BIO_new(BIO_s_mem());
  std::string pem;
  if (bio && PEM_write_bio_X509(bio, cert) == 1) {
    char* data = nullptr;
    long n = BIO_get_mem_data(bio, &data);
    if (n > 0) pem.assign(data, static_cast<size_t>(n));
  }
  BIO_free(bio);
  X509_free(cert);
  return pem;
}

Result<std::string> verifiedCommonName(const std::string& cert_pem, const std::string& ca_pem) {
  BIO* cb = BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size()));
  X509* cert = cb ? PEM_read_bio_X509(cb, nullptr, nullptr, nullptr) : nullptr;
  BIO_free(cb);
  if (!cert) return Status(err::kNotPermitted, "not a PEM certificate");
  X509_STORE* store = X509_STORE_new();
  BIO* ab = BIO_new_mem_buf(ca_pem.data(), static_cast<int>(ca_pem.size()));
  int loaded = 0;
  while (X509* ca = ab ? PEM_read_bio_X509(ab, nullptr, nullptr, nullptr) : nullptr) {
    loaded += X509_STORE_add_cert(store, ca) == 1;
    X509_free(ca);
  }
  ERR_clear_error();  // (the end of the bundle reads as an error)
  BIO_free(ab);
  X509_STORE_CTX* ctx = X509_STORE_CTX_new();
  bool ok = loaded > 0 && ctx && X509_STORE_CTX_init(ctx, store, cert, nullptr) == 1 && X509_verify_cert(ctx) == 1;
  std::string why = ok ? "" : (ctx ? X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx)) : "no memory");
  std::string cn;
  if (ok) {
    char buf[256];
    int n = X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, buf, sizeof buf);
    if (n > 0) cn.assign(buf, static_cast<size_t>(n));
  }
  X509_STORE_CTX_free(ctx);
  X509_STORE_free(store);
  X509_free(cert);
  if (!ok) return Status(err::kNotPermitted, "certificate does not verify: " + why);
  return cn;
}

bool TlsConnection::resumedByPsk() const { return ssl_ && SSL_session_reused(ssl_) == 1; }

std::string TlsConnection::exportKeyingMaterial(const std::string& label, size_t len) const {
  if (!ssl_) return {};
  std::string out(len, '\0');
  if (SSL_export_keying_material(ssl_, reinterpret_cast<unsigned char*>(out.data()), len, label.data(), label.size(),
                                 nullptr, 0, 0) != 1)
    return {};
  return out;
}

Result<std::string> TlsConnection::signWithOwnKey(const std::string& data) const {
  EVP_PKEY* key = ssl_ ? SSL_get_privatekey(ssl_) : nullptr;
  if (!key) return Status(err::kNotPermitted, "no client certificate key to sign with");
  EVP_MD_CTX* mctx = EVP_MD_CTX_new();
  EVP_PKEY_CTX* pctx = nullptr;
  size_t len = 0;
  std::string sig;
  bool ok = mctx && EVP_DigestSignInit(mctx, &pctx, signatureDigest(key), nullptr, key) == 1 && usePss(key, pctx) &&
            EVP_DigestSign(mctx, nullptr, &len, reinterpret_cast<const unsigned char*>(data.data()), data.size()) == 1;
  if (ok) {
    sig.resize(len);
    ok = EVP_DigestSign(mctx, reinterpret_cast<unsigned char*>(sig.data()), &len,
                        reinterpret_cast<const unsigned char*>(data.data()), data.size()) == 1;
    sig.resize(len);
  }
  EVP_MD_CTX_free(mctx);
  if (!ok) return tlsFail("signing with the client key");
  return sig;
}

bool signatureVerifies(const std::string& cert_pem, const std::string& data, const std::string& signature) {
  auto bio = memBio(cert_pem);
  X509* cert = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr);
  EVP_PKEY* key = cert ? X509_get_pubkey(cert) : nullptr;
  EVP_MD_CTX* mctx = EVP_MD_CTX_new();
  EVP_PKEY_CTX* pctx = nullptr;
  bool ok = key && mctx && EVP_DigestVerifyInit(mctx, &pctx, signatureDigest(key), nullptr, key) == 1 &&
            usePss(key, pctx) &&
            EVP_DigestVerify(mctx, reinterpret_cast<const unsigned char*>(signature.data()), signature.size(),
                             reinterpret_cast<const unsigned char*>(data.data()), data.size()) == 1;
  EVP_MD_CTX_free(mctx);
  EVP_PKEY_free(key);
  X509_free(cert);
  ERR_clear_error();
  return ok;
}

namespace {
constexpr char kBindingLabel[] = "EXPORTER-rgpu-client-key-proof";
constexpr char kProofContext[] = "rgpu client key proof v1";
}  // namespace

std::string clientBinding(const TlsConnection& conn) { return conn.exportKeyingMaterial(kBindingLabel, 32); }

Result<std::string> proveClientKey(const TlsConnection& conn) {
  std::string binding = clientBinding(conn);
  if (binding.empty()) return Status(err::kNotPermitted, "no TLS connection to bind a proof to");
  return conn.signWithOwnKey(kProofContext + binding);
}

bool clientKeyProofVerifies(const std::string& cert_pem, const std::string& binding, const std::string& proof) {
  return binding.size() == 32 && !proof.empty() && signatureVerifies(cert_pem, kProofContext + binding, proof);
}

std::string TlsConnection::peerCommonName() const {
  if (!ssl_) return {};
  X509* cert = SSL_get1_peer_certificate(ssl_);
  if (!cert) return {};
  std::string cn;
  if (SSL_get_verify_result(ssl_) == X509_V_OK) {
    char buf[256];
    int n = X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, buf, sizeof buf);
    if (n > 0) cn.assign(buf, static_cast<size_t>(n));
  }
  X509_free(cert);
  return cn;
}

}  // namespace rgpu::common
