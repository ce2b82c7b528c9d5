#include "common/dev_pki.h"

#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <cstdio>
#include <memory>

namespace rgpu::common {
namespace {

struct Free {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
  void operator()(X509* p) const { X509_free(p); }
};
using Key = std::unique_ptr<EVP_PKEY, Free>;
using Cert = std::unique_ptr<X509, Free>;

Key newKey() { return Key(EVP_EC_gen("P-256")); }

void addExt(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (ext) {
    X509_add_ext(cert, ext, -1);
    X509_EXTENSION_free(ext);
  }
}

// `eku`: the extended key usage (default: serverAuth with a SAN, else clientAuth).
Cert makeCert(const std::string& cn, EVP_PKEY* key, X509* issuer, EVP_PKEY* issuer_key, bool ca,
              const char* san, const DevPkiOptions& o, long serial, const char* eku = nullptr) {
  Cert cert(X509_new());
  X509_set_version(cert.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), serial);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), o.not_before_offset_s);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), o.not_before_offset_s + 60 + 86400L * o.valid_days);
  X509_set_pubkey(cert.get(), key);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("rgpu dev"), -1, -1, 0);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509* iss = issuer ? issuer : cert.get();
  X509_set_issuer_name(cert.get(), X509_get_subject_name(iss));
  if (ca) {
    addExt(cert.get(), iss, NID_basic_constraints, "critical,CA:TRUE");
    addExt(cert.get(), iss, NID_key_usage, "critical,keyCertSign,cRLSign");
  } else {
    addExt(cert.get(), iss, NID_basic_constraints, "critical,CA:FALSE");
    addExt(cert.get(), iss, NID_key_usage, "critical,digitalSignature");
    addExt(cert.get(), iss, NID_ext_key_usage, eku ? eku : san ? "serverAuth" : "clientAuth");
    if (san) addExt(cert.get(), iss, NID_subject_alt_name, san);
  }
  X509_sign(cert.get(), issuer_key, EVP_sha256());
  return cert;
}

Status writePem(const std::string& path, X509* cert, EVP_PKEY* key) {
  std::string tmp = path;
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (!f) return Status(err::kFileNotFound, "cannot write " + path);
  if (key) ::chmod(tmp.c_str(), 0600);
  bool ok = cert ? PEM_write_X509(f, cert) == 1 : PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr) == 1;
  std::fclose(f);
  return ok ? Status::ok() : Status(err::kUnknown, "cannot write " + path);
}

}  // namespace

Status makeDevPki(const DevPkiOptions& o) {
  ::mkdir(o.dir.c_str(), 0700);
  Key ca_key = newKey(), srv_key = newKey();
  if (!ca_key || !srv_key) return Status(err::kUnknown, "key generation failed");
  // A name of its own: verifiers find a CA by subject, and two dev PKIs in one
  // trust bundle must not be mistaken for each other.
  unsigned char id[4];
  RAND_bytes(id, sizeof id);
  char ca_name[64];
  std::snprintf(ca_name, sizeof ca_name, "rgpu dev CA %02x%02x%02x%02x", id[0], id[1], id[2], id[3]);
  Cert ca = makeCert(ca_name, ca_key.get(), nullptr, ca_key.get(), true, nullptr, o, 1);
  Cert srv = makeCert("localhost", srv_key.get(), ca.get(), ca_key.get(), false,
                      "DNS:localhost,IP:127.0.0.1,IP:::1", o, 2);
  RGPU_TRY(writePem(o.dir + "/ca.pem", ca.get(), nullptr));
  RGPU_TRY(writePem(o.dir + "/ca.key", nullptr, ca_key.get()));
  RGPU_TRY(writePem(o.dir + "/server.pem", srv.get(), nullptr));
  RGPU_TRY(writePem(o.dir + "/server.key", nullptr, srv_key.get()));
  long serial = 3;
  if (o.etcd) {
    // etcd's own gateway dials etcd with its server certificate: both usages.
    Key k = newKey();
    Cert c = makeCert("localhost", k.get(), ca.get(), ca_key.get(), false, "DNS:localhost,IP:127.0.0.1,IP:::1", o,
                      serial++, "serverAuth,clientAuth");
    RGPU_TRY(writePem(o.dir + "/etcd.pem", c.get(), nullptr));
    RGPU_TRY(writePem(o.dir + "/etcd.key", nullptr, k.get()));
  }
  for (auto& cn : o.clients) {
    Key k = newKey();
    Cert c = makeCert(cn, k.get(), ca.get(), ca_key.get(), false, nullptr, o, serial++);
    RGPU_TRY(writePem(o.dir + "/" + cn + ".pem", c.get(), nullptr));
    RGPU_TRY(writePem(o.dir + "/" + cn + ".key", nullptr, k.get()));
  }
  return Status::ok();
}

}  // namespace rgpu::common
