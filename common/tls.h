// TLS 1.3 connections on a plain socket, safe for one reader thread and many
// writer threads at once.
//
// A context made by TlsContext::makePlaintext() gives connections that carry
// the same frames without TLS: only for a server an operator explicitly bound
// to loopback with `insecure_plaintext = true` (and clients told so); the rest
// of the code cannot tell the difference.
//
// Why not asio::ssl::stream for the data path: its engine is not safe for a read
// and a write in flight from two threads, and the client needs exactly that (a
// receiver thread waits for replies while application threads send calls). So a
// TlsConnection owns an OpenSSL SSL* on a non-blocking fd; `ssl_mu_` serialises
// the SSL_* calls (held only for the call, never across a poll), `write_mu_`
// keeps each writeAll() contiguous on the wire. The daemon still uses Asio for
// accepting and signals.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"

typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_st SSL;
typedef struct x509_st X509;
typedef struct evp_pkey_st EVP_PKEY;
typedef struct ssl_session_st SSL_SESSION;
struct stack_st_X509;

namespace rgpu::common {

struct TlsOptions {
  std::string ca_file;    // CA bundle that signs the peer's certificate
  std::string cert_file;  // our certificate chain (PEM); optional on a client
  std::string key_file;   // our private key (PEM)
  bool require_client_cert = false;  // server only: refuse clients without one
  // The same material as PEM text, used instead of the files when set (the
  // daemon reads the files once and hands workers what it validated).
  std::string ca_pem, cert_pem, key_pem;

  static TlsOptions files(std::string ca, std::string cert = "", std::string key = "", bool require_cert = false) {
    TlsOptions o;
    o.ca_file = std::move(ca);
    o.cert_file = std::move(cert);
    o.key_file = std::move(key);
    o.require_client_cert = require_cert;
    return o;
  }
};

// Reads the files named in `opts` into its *_pem fields (for a snapshot).
Status loadPemFiles(TlsOptions& opts);

// Overwrites a string that held a secret, then frees its buffer.
void wipeSecret(std::string& s);

// Makes OpenSSL clear every block it frees (and every block realloc moves
// away from): its decoders leave copies of a private key (the PEM text, the
// DER) in memory they free without clearing. For a process that must not
// keep a key it used once (a worker after its handshake). Only before
// OpenSSL's first allocation: false after that.
bool clearOpenSslMemoryOnFree();

// The PSK identity a resuming client offers (TLS 1.3 external PSK).
inline constexpr char kResumePskIdentity[] = "rgpu-resume-v1";

// A server context holds its private key itself (not in the SSL_CTX) and
// lends it to each handshake only while that runs; forgetPrivateKey() frees
// it for good, OpenSSL clearing the key's numbers as it does. A worker does
// so after its one full handshake: what a tenant's input reaches afterwards
// holds no key that could impersonate the server. Its later handshakes (a
// client resuming after a dropped connection) authenticate by a TLS 1.3
// external PSK derived from a secret the session gave that client inside
// the first connection (setResumeSecret); without a certificate to present,
// a handshake without that PSK fails.
class TlsContext {
 public:
  static Result<std::unique_ptr<TlsContext>> makeServer(const TlsOptions& opts);
  static Result<std::unique_ptr<TlsContext>> makeClient(const TlsOptions& opts);
  // No TLS at all (see the top of this file).
  static std::unique_ptr<TlsContext> makePlaintext(bool server);
  ~TlsContext();
  SSL_CTX* native() const { return ctx_; }  // nullptr: plaintext
  bool isServer() const { return server_; }
  bool plaintext() const { return ctx_ == nullptr; }

  // Server: frees the private key; full handshakes fail from now on.
  void forgetPrivateKey();
  bool holdsPrivateKey() const;
  // Server: handshakes that offer kResumePskIdentity with the PSK derived from
  // `secret` succeed without a certificate. Empty: none do.
  void setResumeSecret(const std::string& secret);

 private:
  TlsContext(SSL_CTX* ctx, bool server) : ctx_(ctx), server_(server) {}
  static int lendCertificate(SSL* ssl, void* self);
  static int findResumePsk(SSL* ssl, const unsigned char* identity, size_t len, SSL_SESSION** session);
  SSL_CTX* ctx_;
  bool server_;
  mutable std::mutex key_mu_;  // handshakes of resume threads run side by side
  X509* leaf_ = nullptr;
  struct stack_st_X509* chain_ = nullptr;
  EVP_PKEY* key_ = nullptr;
  std::string resume_secret_;
};

class TlsConnection {
 public:
  // Opens a TCP connection and completes the TLS handshake within `timeout`.
  // `server_name` is verified against the server certificate (DNS name or IP).
  // `preamble`, when set, is written on the bare socket before the handshake
  // (session resume tells the daemon which worker it wants, see daemon.h);
  // `resume_secret`, when set, is offered as the session's resume PSK (the
  // worker that holds the session has no certificate key any more).
  // `refused`, when given, is set when every address of `host` refused the
  // TCP connection: nothing listens on that port (the host itself answered).
  // `handshaking`, when given, is called with the connection before its TLS
  // handshake and with null once the handshake is over (before a failed
  // connection is destroyed): another thread may shutdown() it in between to
  // end the handshake at once.
  static Result<std::unique_ptr<TlsConnection>> connect(TlsContext& ctx, const std::string& host,
                                                        uint16_t port,
                                                        const std::string& server_name,
                                                        std::chrono::milliseconds timeout,
                                                        const std::string& preamble = "",
                                                        const std::string& resume_secret = "",
                                                        bool* refused = nullptr,
                                                        const std::function<void(TlsConnection*)>& handshaking = {});
  // Takes ownership of an accepted socket and runs the server handshake.
  static Result<std::unique_ptr<TlsConnection>> accept(TlsContext& ctx, int fd,
                                                       std::chrono::milliseconds timeout);
  ~TlsConnection();

  // Writes all buffers, contiguously with respect to other writers. Thread-safe.
  Status writeAll(const struct iovec* iov, int count);
  // The rate (bytes/s) at which the peer has taken this connection's large
  // writes (at least kRateSampleBytes each; an average weighted to the recent
  // ones), 0 before the first: the link's speed as a sender sees it, with the
  // peer's reading included. lz4 `auto` weighs compressing against it.
  double writeRate() const { return write_rate_.load(std::memory_order_relaxed); }
  static constexpr size_t kRateSampleBytes = 64 * 1024;
  Status write(const void* data, size_t len) {
    struct iovec v{const_cast<void*>(data), len};
    return writeAll(&v, 1);
  }
  // Reads exactly `len` bytes. Only one thread may read. Fails with
  // kDevicesUnavailable when the peer closed or the connection was shut down.
  Status readExact(void* dst, size_t len);
  // Reads whatever is available, at least one byte, at most `len`. Reads
  // shorter than kReadAhead are served from one TLS read of up to that much
  // (a batch of small frames then costs one SSL_read, not two per frame);
  // longer ones (bulk payloads) go straight into `dst` once what was read
  // ahead is used up.
  Result<size_t> readSome(void* dst, size_t len);
  static constexpr size_t kReadAhead = 16 * 1024;  // one TLS record's plaintext at most

  // Bytes read from the socket and not yet taken: read ahead, or in OpenSSL's
  // buffer (decrypted or not). The reader's alone, like a read.
  bool buffered();
  // Whether a read would find data within `timeout_ms` (-1: no limit):
  // buffered(), or on the socket (or the socket failed, which the read then
  // reports). False on a timeout and once shut down. The reader's alone; it
  // need not read afterwards.
  bool readable(int timeout_ms);
  // The socket alone has data (or failed) within `timeout_ms`: any thread
  // may wait on it while another reads, but it does not see buffered().
  bool socketReadable(int timeout_ms);

  // While *counter > 0 the reader polls the socket with yields instead of
  // sleeping in poll(): a caller waiting for a reply is then not delayed by the
  // reader's wake-up. The counter must outlive the connection's reads.
  void setBusyPollWhile(const std::atomic<int>* counter) { busy_poll_ = counter; }

  // Makes pending and future reads and writes fail; wakes a blocked reader.
  void shutdown();
  // Sends TLS close_notify (the peer sees an orderly close), then shutdown().
  void close();
  bool isOpen() const { return !closed_.load(); }
  // The peer ended the stream with TLS close_notify (an orderly close, not a
  // dropped connection). Always false in plaintext.
  bool closedCleanly() const { return clean_close_.load(); }
  bool plaintext() const { return ssl_ == nullptr; }

  // The CN of the peer's verified certificate, empty when it sent none.
  std::string peerCommonName() const;
  // The peer's certificate (PEM) when it verified; "" otherwise.
  std::string peerCertificatePem() const;
  // The handshake authenticated by the session's resume PSK (no certificates).
  bool resumedByPsk() const;
  // RFC 8446 7.5 exporter: `len` bytes both ends derive from this connection
  // alone ("" in plaintext).
  std::string exportKeyingMaterial(const std::string& label, size_t len) const;
  // Client: signs `data` with the private key of the certificate it presented
  // (SHA-256; ECDSA, RSA-PSS or Ed25519 by the key's type). Error without one.
  Result<std::string> signWithOwnKey(const std::string& data) const;
  const std::string& peerAddress() const { return peer_; }
  int fd() const { return fd_; }

 private:
  TlsConnection(int fd, SSL* ssl, std::string peer);
  Status handshake(bool server, std::chrono::milliseconds timeout);
  // One read or write attempt: bytes moved, 0 with `want` set to POLLIN/POLLOUT
  // when it would block, or an error (also marking the connection closed).
  Result<size_t> readOnce(void* dst, size_t len, short& want);
  Result<size_t> writeOnce(const void* src, size_t len, short& want);
  // Waits until fd is readable (events=POLLIN) or writable; false when shut down.
  bool waitFor(short events, int timeout_ms);

  int fd_;
  int wake_fd_;  // eventfd: shutdown() wakes poll()
  SSL* ssl_;     // nullptr: plaintext
  std::string peer_;
  std::mutex ssl_mu_;
  std::mutex write_mu_;
  std::atomic<bool> closed_{false};
  std::atomic<bool> clean_close_{false};
  const std::atomic<int>* busy_poll_ = nullptr;
  std::atomic<double> write_rate_{0};  // writeRate(); written under write_mu_
  // Read ahead (readSome): bytes [ahead_at_, ahead_end_) of ahead_ were read
  // and not yet taken. The reader's alone.
  std::vector<uint8_t> ahead_;
  size_t ahead_at_ = 0, ahead_end_ = 0;
  // readSome's wait-and-read loop, straight into `dst`.
  Result<size_t> readWaiting(void* dst, size_t len);
};

// Applies TCP_NODELAY and keepalive settings so a dead peer is noticed
// (about `dead_after_s` seconds of silence on an otherwise idle link).
void tuneSocket(int fd, int dead_after_s);

// "host:port" -> (host, port). Accepts [v6]:port.
Result<std::pair<std::string, uint16_t>> parseHostPort(const std::string& s);

// Whether `host` (a name or address from a listen setting) can only be reached
// from this machine: localhost, 127.0.0.0/8, ::1.
bool isLoopbackHost(const std::string& host);

// The common name of `cert_pem` when it verifies against the CA bundle
// `ca_pem` (chain and validity period); an error saying why not otherwise.
Result<std::string> verifiedCommonName(const std::string& cert_pem, const std::string& ca_pem);

// Whether `signature` over `data` verifies with the public key of `cert_pem`
// (as signWithOwnKey makes it).
bool signatureVerifies(const std::string& cert_pem, const std::string& data, const std::string& signature);

// A client's proof that it holds the key of the certificate it presented,
// bound to this one connection: its signature over the connection's exporter
// value (clientBinding). The client sends it in its Hello; the worker passes
// certificate, binding and proof to the daemon, which checks all three
// itself: a worker cannot pass off a certificate it saw elsewhere, since no
// other connection has this binding.
std::string clientBinding(const TlsConnection& conn);
Result<std::string> proveClientKey(const TlsConnection& conn);
bool clientKeyProofVerifies(const std::string& cert_pem, const std::string& binding, const std::string& proof);

}  // namespace rgpu::common
