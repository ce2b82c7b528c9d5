// Fuzz target: what a pool member does with what other members wrote to etcd
// (untrusted: any process with write access to the prefix can write it) —
// the member record and load parsed into a view (server/cluster/placement.h),
// then a placement over it. The input is a record, then a load after the
// first NUL byte.
#include <string>
#include <vector>

#include "server/cluster/etcd_client.h"
#include "server/cluster/placement.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rgpu::server;
  std::string in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  const std::string record = in.substr(0, nul), load = nul == std::string::npos ? "" : in.substr(nul + 1);
  std::vector<cluster::EtcdKv> members = {{"/rgpu/members/m", record, 0, 0, 0},
                                          {"/rgpu/members/other", record, 0, 0, 0}};
  std::vector<cluster::EtcdKv> loads = {{"/rgpu/load/m", load, 0, 0, 0}};
  std::vector<std::string> skipped;
  auto view = cluster::parseView("/rgpu/", members, loads, &skipped);
  DeviceRequest req;
  req.count = 2;
  req.min_memory = 1 << 20;
  req.model = "*";
  for (auto p : {cluster::PoolPolicy::kSpread, cluster::PoolPolicy::kPack}) (void)cluster::choose(view, req, p, "m");
  for (const auto& m : view) (void)cluster::couldFit(m, req);
  return 0;
}
