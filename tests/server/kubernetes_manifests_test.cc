// deploy/kubernetes/*.yaml checked without a cluster: no schema validator is
// packaged for Debian (kubeconform, kubeval), so this test reads the YAML
// and checks what the API server and kubelet would refuse or what would
// break at run time — required fields and names, references between the
// objects (volumes, ConfigMaps, Secrets and their keys, ports by name,
// selectors), and that the server.toml and client.toml they carry are read
// by rgpu's own parsers without an error or an unknown key, with the tokens
// in the ConfigMap matching the Secrets'.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <map>
#include <regex>
#include <set>

#include "client/client_config.h"
#include "common/config.h"
#include "server/config/server_config.h"
#include "server/daemon/config_check.h"
#include "tests/support/test_env.h"

namespace rgpu::test {
namespace {

using Objects = std::map<std::string, YAML::Node>;  // "Kind/name" -> object

Objects loadManifests(const std::string& dir) {
  Objects out;
  std::vector<std::filesystem::path> files;
  for (auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".yaml") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (auto& f : files)
    for (auto& doc : YAML::LoadAllFromFile(f.string()))
      if (doc.IsMap()) out[doc["kind"].as<std::string>("?") + "/" + doc["metadata"]["name"].as<std::string>("?")] = doc;
  return out;
}

std::string str(const YAML::Node& n) { return n && n.IsScalar() ? n.as<std::string>() : ""; }

// A ConfigMap's or Secret's keys.
std::set<std::string> keysOf(const YAML::Node& obj) {
  std::set<std::string> keys;
  for (const char* field : {"data", "stringData"})
    if (obj[field])
      for (auto kv : obj[field]) keys.insert(kv.first.as<std::string>());
  return keys;
}

bool labelsMatch(const YAML::Node& selector, const YAML::Node& labels) {
  if (!selector || !selector.IsMap() || selector.size() == 0) return false;
  for (auto kv : selector)
    if (str(labels[kv.first.as<std::string>()]) != kv.second.as<std::string>()) return false;
  return true;
}

// Everything wrong with the set, one line each; empty when all is well.
std::vector<std::string> problemsOf(const Objects& objs) {
  std::vector<std::string> p;
  auto bad = [&](const std::string& where, const std::string& what) { p.push_back(where + ": " + what); };
  static const std::map<std::string, std::string> kApi = {
      {"Namespace", "v1"},    {"ConfigMap", "v1"},    {"Secret", "v1"},
      {"Service", "v1"},      {"Pod", "v1"},          {"DaemonSet", "apps/v1"},
      {"ServiceMonitor", "monitoring.coreos.com/v1"}};
  const std::regex dns1123("[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*");
  const std::regex dns_label("[a-z]([-a-z0-9]*[a-z0-9])?");
  auto find = [&](const std::string& kind, const std::string& name) -> const YAML::Node* {
    auto it = objs.find(kind + "/" + name);
    return it == objs.end() ? nullptr : &it->second;
  };
  for (auto& [id, o] : objs) {
    const std::string kind = str(o["kind"]);
    auto api = kApi.find(kind);
    if (api == kApi.end()) bad(id, "kind not known to this check");
    else if (str(o["apiVersion"]) != api->second) bad(id, "apiVersion must be " + api->second);
    const std::string name = str(o["metadata"]["name"]);
    if (name.size() > 63 || !std::regex_match(name, kind == "Service" ? dns_label : dns1123)) bad(id, "invalid name");
    if (kind != "Namespace" && str(o["metadata"]["namespace"]) != "rgpu") bad(id, "not in namespace rgpu");
    if (kind != "Namespace" && !find("Namespace", str(o["metadata"]["namespace"]))) bad(id, "its namespace is not defined");
  }
  // Pods, whether in a DaemonSet's template or on their own.
  auto checkPod = [&](const std::string& id, const YAML::Node& spec, std::set<std::string>* port_names) {
    std::set<std::string> volumes;
    for (auto v : spec["volumes"]) {
      volumes.insert(str(v["name"]));
      if (v["configMap"]) {
        if (!find("ConfigMap", str(v["configMap"]["name"]))) bad(id, "volume " + str(v["name"]) + ": no such ConfigMap");
      }
      if (v["secret"]) {
        const YAML::Node* s = find("Secret", str(v["secret"]["secretName"]));
        if (!s) bad(id, "volume " + str(v["name"]) + ": no such Secret");
        else
          for (auto item : v["secret"]["items"])
            if (!keysOf(*s).count(str(item["key"]))) bad(id, "volume " + str(v["name"]) + ": no key " + str(item["key"]));
      }
    }
    auto containers = spec["containers"];
    if (!containers || containers.size() == 0) bad(id, "no containers");
    for (const char* list : {"initContainers", "containers"})
      for (auto c : spec[list]) {
        const std::string cn = id + " container " + str(c["name"]);
        if (!std::regex_match(str(c["name"]), dns_label)) bad(cn, "invalid name");
        if (str(c["image"]).empty()) bad(cn, "no image");
        std::set<std::string> ports;
        for (auto port : c["ports"]) {
          const std::string pn = str(port["name"]);
          int number = port["containerPort"].as<int>(0);
          if (pn.size() > 15 || !std::regex_match(pn, std::regex("[a-z0-9]([-a-z0-9]*[a-z0-9])?")))
            bad(cn, "port name '" + pn + "' is not an IANA service name");
          if (number < 1 || number > 65535) bad(cn, "port " + pn + " out of range");
          ports.insert(pn);
          if (port_names) port_names->insert(pn);
        }
        for (const char* probe : {"readinessProbe", "livenessProbe"})
          for (const char* how : {"tcpSocket", "httpGet"})
            if (auto pr = c[probe][how]; pr && !pr["port"].IsNull() && pr["port"].IsScalar() &&
                                         !std::isdigit(static_cast<unsigned char>(str(pr["port"])[0])) &&
                                         !ports.count(str(pr["port"])))
              bad(cn, std::string(probe) + " names port " + str(pr["port"]) + ", which it does not have");
        for (auto m : c["volumeMounts"]) {
          if (!volumes.count(str(m["name"]))) bad(cn, "mounts " + str(m["name"]) + ", which is not a volume");
          if (str(m["mountPath"]).empty() || str(m["mountPath"])[0] != '/') bad(cn, "mountPath is not absolute");
          if (m["subPath"])  // a key of the ConfigMap or Secret mounted
            for (auto v : spec["volumes"]) {
              if (str(v["name"]) != str(m["name"])) continue;
              const YAML::Node* src = v["configMap"] ? find("ConfigMap", str(v["configMap"]["name"]))
                                      : v["secret"] ? find("Secret", str(v["secret"]["secretName"]))
                                                    : nullptr;
              bool listed = false;
              for (auto item : v["secret"]["items"]) listed |= str(item["path"]) == str(m["subPath"]);
              if (src && !listed && !keysOf(*src).count(str(m["subPath"])))
                bad(cn, "subPath " + str(m["subPath"]) + " is no key of its volume");
            }
        }
        for (auto e : c["env"])
          if (auto ref = e["valueFrom"]["secretKeyRef"]) {
            const YAML::Node* s = find("Secret", str(ref["name"]));
            if (!s || !keysOf(*s).count(str(ref["key"]))) bad(cn, "env " + str(e["name"]) + ": no such Secret key");
          }
      }
  };
  std::set<std::string> server_ports;
  const YAML::Node* ds = find("DaemonSet", "rgpu-server");
  if (!ds) bad("DaemonSet/rgpu-server", "missing");
  else {
    const YAML::Node& d = *ds;
    if (!labelsMatch(d["spec"]["selector"]["matchLabels"], d["spec"]["template"]["metadata"]["labels"]))
      bad("DaemonSet/rgpu-server", "its selector does not select its own pods");
    auto spec = d["spec"]["template"]["spec"];
    checkPod("DaemonSet/rgpu-server", spec, &server_ports);
    if (str(spec["nodeSelector"]["nvidia.com/gpu.present"]) != "true")
      bad("DaemonSet/rgpu-server", "not limited to GPU nodes (nvidia.com/gpu.present)");
    if (!spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])
      bad("DaemonSet/rgpu-server", "asks the device plugin for no nvidia.com/gpu");
  }
  const YAML::Node* svc = find("Service", "rgpu-server");
  if (!svc) bad("Service/rgpu-server", "missing");
  else {
    if (str((*svc)["spec"]["clusterIP"]) != "None") bad("Service/rgpu-server", "not headless");
    if (ds && !labelsMatch((*svc)["spec"]["selector"], (*ds)["spec"]["template"]["metadata"]["labels"]))
      bad("Service/rgpu-server", "selects no rgpu-server pod");
    for (auto port : (*svc)["spec"]["ports"])
      if (!server_ports.count(str(port["targetPort"]))) bad("Service/rgpu-server", "targetPort " + str(port["targetPort"]) + " is no container port");
  }
  const YAML::Node* sm = find("ServiceMonitor", "rgpu-server");
  if (!sm) bad("ServiceMonitor/rgpu-server", "missing");
  else if (svc) {
    if (!labelsMatch((*sm)["spec"]["selector"]["matchLabels"], (*svc)["metadata"]["labels"]))
      bad("ServiceMonitor/rgpu-server", "selects no Service");
    std::set<std::string> svc_ports;
    for (auto port : (*svc)["spec"]["ports"]) svc_ports.insert(str(port["name"]));
    for (auto e : (*sm)["spec"]["endpoints"]) {
      if (!svc_ports.count(str(e["port"]))) bad("ServiceMonitor/rgpu-server", "endpoint port " + str(e["port"]) + " is not the Service's");
      auto ref = e["bearerTokenSecret"];
      const YAML::Node* s = find("Secret", str(ref["name"]));
      if (!s || !keysOf(*s).count(str(ref["key"]))) bad("ServiceMonitor/rgpu-server", "bearerTokenSecret names no Secret key");
    }
  }
  for (auto& [id, o] : objs)
    if (str(o["kind"]) == "Pod") checkPod(id, o["spec"], nullptr);
  return p;
}

std::string manifestsDir() { return std::string(RGPU_SOURCE_DIR) + "/deploy/kubernetes"; }

TEST(KubernetesManifests, AreCompleteAndConsistentWithoutACluster) {
  Objects objs = loadManifests(manifestsDir());
  for (const char* must : {"Namespace/rgpu", "DaemonSet/rgpu-server", "Service/rgpu-server", "ConfigMap/rgpu-server-config",
                           "Secret/rgpu-server-tls", "ServiceMonitor/rgpu-server", "Pod/vector-add"})
    EXPECT_TRUE(objs.count(must)) << "no " << must;
  auto problems = problemsOf(objs);
  for (auto& line : problems) ADD_FAILURE() << line;
}

TEST(KubernetesManifests, TheServerAndClientConfigsTheyCarryAreReadCleanlyAndAgree) {
  Objects objs = loadManifests(manifestsDir());
  ASSERT_TRUE(objs.count("ConfigMap/rgpu-server-config") && objs.count("DaemonSet/rgpu-server"));
  const std::string toml = objs["ConfigMap/rgpu-server-config"]["data"]["server.toml"].as<std::string>();
  auto cfg = server::parseServerConfig(toml, "server.toml");
  ASSERT_TRUE(cfg) << cfg.status().message();
  EXPECT_TRUE(server::unknownKeys(toml, "server.toml").empty());
  // Ports and files as the pod has them.
  auto container = objs["DaemonSet/rgpu-server"]["spec"]["template"]["spec"]["containers"][0];
  std::map<std::string, int> ports;
  for (auto p : container["ports"]) ports[p["name"].as<std::string>()] = p["containerPort"].as<int>();
  EXPECT_EQ(common::parseHostPort(cfg->listen)->second, ports["rgpu"]);
  EXPECT_EQ(common::parseHostPort(cfg->pool.metrics_listen)->second, ports["metrics"]);
  std::string tls_mount;
  for (auto m : container["volumeMounts"])
    if (m["name"].as<std::string>() == "tls") tls_mount = m["mountPath"].as<std::string>();
  auto tls_keys = keysOf(objs["Secret/rgpu-server-tls"]);
  for (const std::string& file : {cfg->tls_cert, cfg->tls_key, cfg->tls_ca}) {
    ASSERT_EQ(file.rfind(tls_mount + "/", 0), 0u) << file << " is not in the TLS Secret's mount " << tls_mount;
    EXPECT_TRUE(tls_keys.count(file.substr(tls_mount.size() + 1))) << file;
  }
  // Stop outlasts the drain.
  EXPECT_GT(objs["DaemonSet/rgpu-server"]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"].as<int>() * 1000,
            static_cast<int>(cfg->pool.drain_timeout_ms));
  // No secret in the ConfigMap: digests only, and they are the Secrets' tokens'.
  for (auto& u : cfg->users) EXPECT_EQ(u.token.rfind("sha256:", 0), 0u) << u.name << "'s token is in the clear";
  EXPECT_EQ(cfg->pool.metrics_token,
            server::tokenDigest(objs["Secret/rgpu-metrics-token"]["stringData"]["token"].as<std::string>()));
  const std::string client_token = objs["Secret/rgpu-client-token"]["stringData"]["token"].as<std::string>();
  EXPECT_EQ(server::userFor(*cfg, "", client_token), "training");

  // The client's config, as the client library reads it.
  TempDir dir;
  writeFile(dir.file("client.toml"), objs["ConfigMap/rgpu-client-config"]["data"]["client.toml"].as<std::string>());
  ::setenv("RGPU_CONFIG", dir.file("client.toml").c_str(), 1);
  auto client = client::loadClientConfig();
  ::unsetenv("RGPU_CONFIG");
  ASSERT_TRUE(client) << client.status().message();
  EXPECT_TRUE(client->unknown_keys.empty()) << client->unknown_keys[0];
  EXPECT_EQ(client->server, "rgpu-server.rgpu.svc.cluster.local:" + std::to_string(ports["rgpu"]));
  // The program's container finds rgpu's libraries where the init container put them.
  auto pod = objs["Pod/vector-add"]["spec"];
  std::string lib_mount, ld_path;
  for (auto m : pod["initContainers"][0]["volumeMounts"]) lib_mount = m["mountPath"].as<std::string>();
  for (auto e : pod["containers"][0]["env"])
    if (e["name"].as<std::string>() == "LD_LIBRARY_PATH") ld_path = e["value"].as<std::string>();
  EXPECT_EQ(ld_path.substr(0, ld_path.find(':')), lib_mount);
  EXPECT_NE(pod["initContainers"][0]["command"][2].as<std::string>().find(lib_mount), std::string::npos);
  EXPECT_EQ(pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
               ["matchExpressions"][0]["operator"].as<std::string>(),
            "DoesNotExist");
}

TEST(KubernetesManifests, TheCheckFindsBrokenReferences) {
  Objects objs = loadManifests(manifestsDir());
  ASSERT_TRUE(problemsOf(objs).empty());
  auto ds = YAML::Clone(objs["DaemonSet/rgpu-server"]);
  ds["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"] = "no-such-config";
  ds["spec"]["template"]["spec"]["containers"][0]["ports"][0]["name"] = "rgpu-port-name-too-long";
  objs["DaemonSet/rgpu-server"] = ds;
  auto sm = YAML::Clone(objs["ServiceMonitor/rgpu-server"]);
  sm["spec"]["endpoints"][0]["bearerTokenSecret"]["key"] = "nope";
  objs["ServiceMonitor/rgpu-server"] = sm;
  std::string all;
  for (auto& line : problemsOf(objs)) all += line + "\n";
  EXPECT_NE(all.find("volume config: no such ConfigMap"), std::string::npos) << all;
  EXPECT_NE(all.find("is not an IANA service name"), std::string::npos) << all;
  EXPECT_NE(all.find("targetPort rgpu is no container port"), std::string::npos) << all;
  EXPECT_NE(all.find("readinessProbe names port rgpu"), std::string::npos) << all;
  EXPECT_NE(all.find("bearerTokenSecret names no Secret key"), std::string::npos) << all;
}

}  // namespace
}  // namespace rgpu::test
