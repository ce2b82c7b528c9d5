// Writes the seed corpus of fuzz_dispatch (tests/fuzz/corpus/dispatch/): call
// sequences a real client makes, in the record format of dispatch_input.h.
//
//   make_dispatch_seeds OUT_DIR KERNELS_PTXONLY_FATBIN
//
// The fatbin is build/tests/data/kernels_ptxonly.fatbin (tests/data/kernels.cu).
#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "protocol/rgpu.capnp.h"
#include "tests/fuzz/dispatch_input.h"
#include "tests/fuzz/seed_records.h"

namespace {

using rgpu::fuzz::add;
using rgpu::fuzz::appendRandSeeds;
using rgpu::fuzz::relocated;
using Request = rgpu::wire::Request;

void malloc(std::string& out, uint64_t size, int device = 0) {
  add(out, false, [&](Request::Builder r) {
    auto m = r.initMalloc();
    m.setDevice(device);
    m.setSize(size);
  });
}

void sync(std::string& out) {
  add(out, false, [](Request::Builder r) { r.initDeviceSynchronize().setDevice(0); });
}

std::string memory() {
  std::string s;
  malloc(s, 4096);
  malloc(s, 1 << 20);
  add(s, true, [](Request::Builder r) {
    auto m = r.initMemcpyHtoD();
    m.setDst(relocated(0, 0));
    m.setSize(4096);
    m.initStream();
  }, std::string(4096, '\x5a'));
  add(s, false, [](Request::Builder r) {
    auto m = r.initMemcpyDtoH();
    m.setSrc(relocated(0, 16));
    m.setSize(256);
    m.initStream();
  });
  add(s, true, [](Request::Builder r) {
    auto m = r.initMemset();
    m.setDst(relocated(0, 100));
    m.setValue(7);
    m.setSize(50);
    m.initStream();
  });
  add(s, true, [](Request::Builder r) {
    auto m = r.initMemcpyDtoD();
    m.setDst(relocated(1, 0));
    m.setSrc(relocated(0, 0));
    m.setSize(4096);
    m.initStream();
  });
  add(s, true, [](Request::Builder r) {
    auto m = r.initMemcpy2D();
    m.setKind(1);
    m.setDst(relocated(1, 64));
    m.setDpitch(512);
    m.setWidth(32);
    m.setHeight(8);
    m.initStream();
  }, std::string(256, '\x11'));
  add(s, false, [](Request::Builder r) {
    auto m = r.initMemcpy2D();
    m.setKind(2);
    m.setSrc(relocated(1, 64));
    m.setSpitch(512);
    m.setWidth(32);
    m.setHeight(8);
    m.initStream();
  });
  add(s, true, [](Request::Builder r) {
    auto m = r.initMemset2D();
    m.setDst(relocated(1, 0));
    m.setPitch(1024);
    m.setValue(3);
    m.setWidth(100);
    m.setHeight(10);
    m.initStream();
  });
  add(s, false, [](Request::Builder r) { r.initPointerAttributes().setPtr(relocated(1, 5)); });
  add(s, false, [](Request::Builder r) { r.initMemGetInfo().setDevice(0); });
  add(s, false, [](Request::Builder r) { r.initFree().setPtr(relocated(0, 0)); });
  add(s, false, [](Request::Builder r) { r.initFree().setPtr(relocated(0, 0)); });  // twice
  sync(s);
  return s;
}

std::string streams() {
  std::string s;
  add(s, true, [](Request::Builder r) {
    auto c = r.initStreamCreate();
    c.initStream().setId(1);
    c.setFlags(1);
    c.setPriority(-1);
  });
  add(s, true, [](Request::Builder r) { r.initEventCreate().setId(1); });
  add(s, true, [](Request::Builder r) { r.initEventCreate().setId(2); });
  add(s, true, [](Request::Builder r) {
    auto e = r.initEventRecord();
    e.setId(1);
    e.initStream().setId(1);
  });
  add(s, true, [](Request::Builder r) {
    auto w = r.initStreamWaitEvent();
    w.initStream();
    w.setEvent(1);
  });
  add(s, true, [](Request::Builder r) {
    auto e = r.initEventRecord();
    e.setId(2);
    e.initStream().setId(1);
  });
  add(s, false, [](Request::Builder r) { r.initStreamQuery().setId(1); });
  add(s, false, [](Request::Builder r) { r.initEventQuery().setId(1); });
  add(s, false, [](Request::Builder r) { r.initEventSynchronize().setId(2); });
  add(s, false, [](Request::Builder r) {
    auto e = r.initEventElapsedTime();
    e.setStart(1);
    e.setEnd(2);
  });
  add(s, true, [](Request::Builder r) {
    auto h = r.initHostFuncEnqueue();
    h.setId(7);
    h.initStream().setId(1);
  });
  add(s, false, [](Request::Builder r) { r.initStreamSynchronize().setId(1); });
  add(s, true, [](Request::Builder r) { r.initStreamDestroy().setId(1); });
  add(s, true, [](Request::Builder r) { r.initEventDestroy().setId(1); });
  add(s, true, [](Request::Builder r) { r.initEventDestroy().setId(2); });
  sync(s);
  add(s, false, [](Request::Builder r) { r.setPing(); });
  return s;
}

std::string module(const std::string& fatbin) {
  std::string s;
  add(s, false, [](Request::Builder r) {
    auto m = r.initModuleLoad();
    m.setId(1);
    m.setDevice(0);
  }, fatbin);
  add(s, false, [](Request::Builder r) {
    auto f = r.initFunctionRegister();
    f.setId(1);
    f.setModule(1);
    f.setName("_Z8k_vecaddPKfS0_Pfi");
  });
  add(s, false, [](Request::Builder r) {
    auto f = r.initFunctionRegister();
    f.setId(2);
    f.setModule(1);
    f.setName("_Z6k_fillIfEvPT_S0_i");
  });
  for (int i = 0; i < 3; ++i) malloc(s, 1024);
  add(s, false, [](Request::Builder r) { r.initFuncGetAttributes().setId(1); });
  add(s, false, [](Request::Builder r) {
    auto o = r.initOccupancy();
    o.setId(1);
    o.setBlockSize(256);
  });
  add(s, false, [](Request::Builder r) {
    auto a = r.initFuncSetAttribute();
    a.setId(1);
    a.setAttr(8);  // cudaFuncAttributeMaxDynamicSharedMemorySize
    a.setValue(1024);
  });
  // k_fill<float>(p, 2.5f, 256) then k_vecadd(p0, p0, p2, 256).
  add(s, true, [](Request::Builder r) {
    auto l = r.initLaunchKernel();
    l.setFunction(2);
    l.initGrid().setX(1);
    l.getGrid().setY(1);
    l.getGrid().setZ(1);
    l.initBlock().setX(256);
    l.getBlock().setY(1);
    l.getBlock().setZ(1);
    l.initStream();
    uint64_t p = relocated(0, 0);
    float v = 2.5f;
    int n = 256;
    std::string params(16, '\0');
    std::memcpy(&params[0], &p, 8);
    std::memcpy(&params[8], &v, 4);
    std::memcpy(&params[12], &n, 4);
    l.setParams(kj::arrayPtr(reinterpret_cast<const kj::byte*>(params.data()), params.size()));
  });
  add(s, true, [](Request::Builder r) {
    auto l = r.initLaunchKernel();
    l.setFunction(1);
    l.initGrid().setX(2);
    l.getGrid().setY(1);
    l.getGrid().setZ(1);
    l.initBlock().setX(128);
    l.getBlock().setY(1);
    l.getBlock().setZ(1);
    l.setSharedMem(0);
    l.initStream();
    uint64_t a = relocated(0, 0), c = relocated(2, 0);
    int n = 256;
    std::string params(32, '\0');
    std::memcpy(&params[0], &a, 8);
    std::memcpy(&params[8], &a, 8);
    std::memcpy(&params[16], &c, 8);
    std::memcpy(&params[24], &n, 4);
    params.resize(28);
    l.setParams(kj::arrayPtr(reinterpret_cast<const kj::byte*>(params.data()), params.size()));
  });
  sync(s);
  add(s, false, [](Request::Builder r) {
    auto m = r.initMemcpyDtoH();
    m.setSrc(relocated(2, 0));
    m.setSize(1024);
    m.initStream();
  });
  add(s, false, [](Request::Builder r) { r.initModuleUnload().setId(1); });
  add(s, false, [](Request::Builder r) { r.setPing(); });
  return s;
}

std::string devices() {
  std::string s;
  malloc(s, 8192, 0);
  malloc(s, 8192, 1);
  add(s, true, [](Request::Builder r) {
    auto p = r.initMemcpyPeer();
    p.setDst(relocated(1, 0));
    p.setDstDevice(1);
    p.setSrc(relocated(0, 0));
    p.setSrcDevice(0);
    p.setSize(8192);
    p.initStream();
  });
  add(s, false, [](Request::Builder r) { r.initDeviceSynchronize().setDevice(1); });
  add(s, false, [](Request::Builder r) { r.initDeviceReset().setDevice(0); });
  malloc(s, 100, 0);
  add(s, false, [](Request::Builder r) { r.setPoolStatus(); });
  return s;
}

// The use-after-free of the security review: work queued behind a held host
// function on device 1 targets memory of device 0 that is freed, unloaded or
// reset meanwhile, and reused by later allocations, before the stream goes on.
std::string lifetimes(const std::string& fatbin) {
  std::string s;
  add(s, false, [](Request::Builder r) { r.initModuleLoad().setId(1); }, fatbin);
  add(s, false, [](Request::Builder r) {
    auto v = r.initVarRegister();
    v.setId(1);
    v.setModule(1);
    v.setName("table");
    v.setSize(4096);
  });
  add(s, false, [](Request::Builder r) { r.initSymbolAddress().setId(1); });  // allocation 0
  malloc(s, 8192, 0);                                                          // allocation 1
  add(s, false, [](Request::Builder r) {
    auto f = r.initFunctionRegister();
    f.setId(2);
    f.setModule(1);
    f.setName("_Z6k_fillIfEvPT_S0_i");
  });
  add(s, true, [](Request::Builder r) {
    auto c = r.initStreamCreate().initStream();
    c.setId(5);
    c.setDevice(1);
  });
  add(s, true, [](Request::Builder r) {
    auto h = r.initHostFuncEnqueue();
    h.setId(rgpu::fuzz::kHeldHostFunction | 1);
    h.initStream().setId(5);
    h.getStream().setDevice(1);
  });
  auto on5 = [](auto st) {
    st.setId(5);
    st.setDevice(1);
  };
  add(s, false, [&](Request::Builder r) {
    auto m = r.initMemcpyDtoH();
    m.setSrc(relocated(0, 0));
    m.setSize(4096);
    on5(m.initStream());
  });
  add(s, true, [&](Request::Builder r) {
    auto m = r.initMemcpyHtoD();
    m.setDst(relocated(1, 0));
    m.setSize(4096);
    on5(m.initStream());
  }, std::string(4096, '\x77'));
  add(s, true, [&](Request::Builder r) {
    auto l = r.initLaunchKernel();
    l.setFunction(2);
    auto g = l.initGrid();
    g.setX(8), g.setY(1), g.setZ(1);
    auto b = l.initBlock();
    b.setX(256), b.setY(1), b.setZ(1);
    on5(l.initStream());
    uint64_t p = relocated(1, 0);
    float v = 2.5f;
    int n = 2048;
    std::string params(16, '\0');
    std::memcpy(&params[0], &p, 8);
    std::memcpy(&params[8], &v, 4);
    std::memcpy(&params[12], &n, 4);
    l.setParams(kj::arrayPtr(reinterpret_cast<const kj::byte*>(params.data()), params.size()));
  });
  add(s, false, [](Request::Builder r) { r.initModuleUnload().setId(1); });
  add(s, false, [](Request::Builder r) { r.initFree().setPtr(relocated(1, 0)); });
  add(s, false, [](Request::Builder r) {
    auto v = r.initVarRegister();  // the review's heap grooming: a long name
    v.setId(9);
    v.setModule(1);
    v.setName(std::string(4000, 'n'));
    v.setSize(8);
  });
  malloc(s, 4096, 0);
  malloc(s, 8192, 0);
  add(s, false, [](Request::Builder r) { r.initDeviceReset().setDevice(0); });
  malloc(s, 8192, 0);
  add(s, false, [](Request::Builder r) { r.initDeviceSynchronize().setDevice(0); }, "", false, true);
  add(s, false, [](Request::Builder r) { r.initDeviceSynchronize().setDevice(1); });
  return s;
}

std::string compressed() {
  std::string s;
  malloc(s, 4096);
  // One lz4 bulk block stored raw (stored_len == raw_len): u32 raw | u32 stored | bytes.
  std::string bulk;
  uint32_t n = 4096;
  bulk.append(reinterpret_cast<const char*>(&n), 4);
  bulk.append(reinterpret_cast<const char*>(&n), 4);
  bulk += std::string(4096, '\x42');
  add(s, true, [](Request::Builder r) {
    auto m = r.initMemcpyHtoD();
    m.setDst(relocated(0, 0));
    m.setSize(4096);
    m.initStream();
  }, bulk, true);
  add(s, false, [](Request::Builder r) {
    auto m = r.initMemcpyDtoH();
    m.setSrc(relocated(0, 0));
    m.setSize(4096);
    m.initStream();
  });
  return s;
}

// Graphs: host copies, a memset, and conditional nodes (a handle is
// relocated like an allocation: the harness keeps the handle replies too).
std::string graphs() {
  std::string s;
  malloc(s, 4096);
  add(s, false, [](Request::Builder r) { r.initConditionalHandleCreate().setDevice(0); });
  add(s, false, [](Request::Builder r) {
    auto g = r.initGraphCreate();
    g.setId(1);
    auto nodes = g.initNodes(9);
    auto h2d = nodes[0].initHostToDevice();
    h2d.setDevice(relocated(0, 0)), h2d.setSize(64);
    auto rs = nodes[1].initConditionalReset();
    rs.setHandle(relocated(1, 0)), rs.setValue(1);
    auto c = nodes[2].initConditional();
    c.setHandle(relocated(1, 0)), c.setType(rgpu::wire::ConditionalType::IF);
    c.initBodies(2).set(0, 1);
    auto m = nodes[3].initRequest().initMemset();
    m.setDst(relocated(0, 64)), m.setValue(7), m.setSize(64);
    m.initStream();
    auto sw = nodes[4].initConditional();
    sw.setHandle(relocated(1, 0)), sw.setType(rgpu::wire::ConditionalType::SWITCH);
    auto b = sw.initBodies(3);
    b.set(0, 0), b.set(1, 2), b.set(2, 1);
    auto c1 = nodes[5].initRequest().initMemcpyDtoD();
    c1.setDst(relocated(0, 256)), c1.setSrc(relocated(0, 0)), c1.setSize(64);
    c1.initStream();
    nodes[6].setEmpty();
    auto m2 = nodes[7].initRequest().initMemset();
    m2.setDst(relocated(0, 512)), m2.setValue(9), m2.setSize(64);
    m2.initStream();
    auto d2h = nodes[8].initDeviceToHost();
    d2h.setDevice(relocated(0, 0)), d2h.setSize(1024);
  });
  add(s, false, [](Request::Builder r) {
    auto l = r.initGraphLaunch();
    l.setId(1);
    l.initStream();
  }, std::string(64, '\x11'));
  add(s, false, [](Request::Builder r) { r.initStreamSynchronize(); });
  add(s, true, [](Request::Builder r) { r.initGraphDestroy().setId(1); });
  sync(s);
  return s;
}

// Arrays, copies with them in every direction, texture and surface objects,
// and a device reset that drops them. Array and object handles are the sim's
// counters (1, 2, ... in creation order within a session), stable from run to run.
std::string arrays() {
  std::string s;
  malloc(s, 1 << 16);
  auto array = [&](uint64_t w, uint64_t h, uint64_t d, uint32_t flags, uint32_t levels) {
    add(s, false, [&](Request::Builder r) {
      auto a = r.initArrayCreate();
      auto f = a.initFormat();
      f.setX(32), f.setKind(2);
      a.setWidth(w), a.setHeight(h), a.setDepth(d), a.setFlags(flags), a.setLevels(levels);
    });
  };
  array(16, 8, 0, 0x02, 0);  // 1: 2D, surface load/store
  array(8, 8, 6, 0x04, 0);   // 2: cubemap
  array(16, 16, 0, 0, 3);    // 3: mipmapped, 3 levels
  auto copy = [&](bool async, auto src, auto dst, uint64_t w, uint64_t h, uint64_t d, const std::string& bulk) {
    add(s, async, [&](Request::Builder r) {
      auto c = r.initCopy3D();
      src(c.initSrc());
      dst(c.initDst());
      c.setWidth(w), c.setHeight(h), c.setDepth(d);
      c.initStream();
    }, bulk);
  };
  using Side = rgpu::wire::CopySide::Builder;
  auto host = [](Side x) { x.setHost(); };
  auto arr1 = [](Side x) { x.setArray(1), x.setX(8), x.setY(1); };
  auto level2 = [](Side x) { x.setArray(3), x.setLevel(2); };
  auto dev = [](Side x) { x.setDevice(relocated(0, 0)), x.setPitch(64), x.setRows(8); };
  copy(true, host, arr1, 32, 4, 1, std::string(128, '\x21'));
  copy(false, arr1, host, 32, 4, 1, "");
  copy(true, arr1, dev, 32, 4, 1, "");
  copy(true, dev, level2, 16, 4, 1, "");
  copy(true, host, [](Side x) { x.setArray(2), x.setZ(5); }, 32, 8, 1, std::string(256, '\x33'));
  // Graphs of array copies: between arrays and device memory (2), with a host
  // side (3: refused, host sides come as host copy nodes), of an array that
  // is destroyed before the launch (4: refused at the launch).
  auto graph = [&](uint32_t id, std::initializer_list<std::pair<std::function<void(Side)>, std::function<void(Side)>>> cs) {
    add(s, false, [&](Request::Builder r) {
      auto g = r.initGraphCreate();
      g.setId(id);
      auto nodes = g.initNodes(static_cast<unsigned>(cs.size()));
      unsigned i = 0;
      for (auto& [src, dst] : cs) {
        auto c = nodes[i++].initRequest().initCopy3D();
        src(c.initSrc());
        dst(c.initDst());
        c.setWidth(32), c.setHeight(4), c.setDepth(1);
        c.initStream();
      }
    });
  };
  auto arr2 = [](Side x) { x.setArray(2), x.setZ(3); };
  graph(2, {{arr1, dev}, {dev, arr1}, {arr1, arr2}});
  graph(3, {{host, arr1}});
  graph(4, {{arr2, dev}});
  auto launch = [&](uint32_t id) {
    add(s, false, [&](Request::Builder r) {
      auto l = r.initGraphLaunch();
      l.setId(id);
      l.initStream();
    });
  };
  launch(2);
  launch(2);
  add(s, false, [](Request::Builder r) {  // 4: a bilinear texture of array 1
    auto t = r.initTextureCreate();
    t.setResource(rgpu::wire::TextureResource::ARRAY);
    t.setHandle(1);
    auto m = t.initAddressMode(3);
    m.set(0, 3), m.set(1, 0), m.set(2, 1);
    t.setFilterMode(1);
    t.setNormalizedCoords(true);
    t.initBorderColor(4).set(0, 1.5f);
  });
  add(s, false, [](Request::Builder r) {  // 5: a linear texture of the allocation
    auto t = r.initTextureCreate();
    t.setResource(rgpu::wire::TextureResource::LINEAR);
    t.setPtr(relocated(0, 0));
    t.initFormat().setX(32);
    t.setSize(4096);
  });
  add(s, false, [](Request::Builder r) {  // 6: mipmapped, linear between levels
    auto t = r.initTextureCreate();
    t.setResource(rgpu::wire::TextureResource::MIPMAPPED_ARRAY);
    t.setHandle(3);
    t.setMipmapFilterMode(1);
    t.setMaxMipmapLevelClamp(2);
  });
  add(s, false, [](Request::Builder r) { r.initSurfaceCreate().setArray(1); });  // 7
  add(s, true, [](Request::Builder r) {  // another device's value first: not this one
    auto t = r.initTextureDestroy();
    t.setHandle(5);
    t.setDevice(1);
  });
  add(s, true, [](Request::Builder r) { r.initTextureDestroy().setHandle(5); });
  add(s, true, [](Request::Builder r) { r.initSurfaceDestroy().setHandle(7); });
  add(s, true, [](Request::Builder r) { r.initArrayDestroy().setHandle(2); });
  launch(4);
  sync(s);
  add(s, false, [](Request::Builder r) { r.initDeviceReset().setDevice(0); });
  return s;
}

}  // namespace

// The math libraries' requests (docs/cufft.md, cusolver.md, cusparse.md,
// cudnn.md, curand.md): each on two allocations of 64 KiB, with what a client sends.
std::string libraries() {
  std::string s;
  malloc(s, 1 << 16);
  malloc(s, 1 << 16);
  auto fft = [](rgpu::wire::FftDesc::Builder d, int32_t type, std::initializer_list<int64_t> n) {
    d.setType(type);
    d.setRank(static_cast<int32_t>(n.size()));
    auto sizes = d.initN(static_cast<unsigned>(n.size()));
    unsigned i = 0;
    for (int64_t v : n) sizes.set(i++, v);
    d.setBatch(2);
  };
  add(s, false, [&](Request::Builder r) {
    auto m = r.initFftPlan();
    m.setPlan(7);
    fft(m.initDesc(), 0x29, {64});
  });
  add(s, true, [&](Request::Builder r) {
    auto m = r.initFftExec();
    m.initStream();
    m.setPlan(7);
    fft(m.initDesc(), 0x29, {64});
    m.setInput(relocated(0, 0));
    m.setOutput(relocated(1, 0));
    m.setDirection(-1);
  });
  add(s, true, [&](Request::Builder r) {  // R2C 2D in place (padded rows)
    auto m = r.initFftExec();
    m.initStream();
    m.setPlan(8);
    fft(m.initDesc(), 0x2a, {8, 14});
    m.setInput(relocated(0, 0));
    m.setOutput(relocated(0, 0));
  });
  add(s, true, [](Request::Builder r) { r.initFftRelease().setPlan(7); });
  auto solver = [&](bool size, uint8_t op, int32_t type) {
    add(s, !size, [&](Request::Builder r) {
      auto m = size ? r.initSolverBufferSize() : r.initSolver();
      m.initStream();
      m.setOp(op);
      m.setType(type);
      m.setM(8), m.setN(8), m.setK(4), m.setNrhs(2);
      m.setA(relocated(0, 0)), m.setLda(8);
      m.setB(relocated(0, 1024)), m.setLdb(8);
      m.setIpiv(relocated(1, 0)), m.setTau(relocated(1, 64)), m.setW(relocated(1, 256));
      m.setJobu('S'), m.setJobvt('A');
      m.setU(relocated(0, 4096)), m.setLdu(8), m.setVt(relocated(0, 8192)), m.setLdvt(8);
      m.setInfo(relocated(1, 1024));
    });
  };
  solver(true, 0, 1);  // potrf, f64
  for (uint8_t op = 0; op < 8; ++op) solver(false, op, op % 2 ? 5 : 0);
  auto sparse = [&](bool size, uint8_t op, uint8_t format) {
    add(s, !size, [&](Request::Builder r) {
      auto m = size ? r.initSparseBufferSize() : r.initSparse();
      m.initStream();
      m.setOp(op);
      m.initAlpha().setHost(kj::heapArray<kj::byte>(8));
      m.initBeta().setHost(kj::heapArray<kj::byte>(8));
      auto a = m.initA();
      a.setFormat(format), a.setRows(16), a.setCols(12), a.setNnz(4);
      a.setOffsets(relocated(0, 0)), a.setIndices(relocated(0, 512)), a.setValues(relocated(0, 1024));
      a.setOffsetType(2), a.setIndexType(2);
      auto b = m.initB();
      b.setRows(12), b.setCols(op ? 3 : 1), b.setLd(12), b.setValues(relocated(1, 0)), b.setOrder(1);
      auto c = m.initC();
      c.setRows(16), c.setCols(op ? 3 : 1), c.setLd(16), c.setValues(relocated(1, 4096)), c.setOrder(1);
    });
  };
  sparse(true, 0, 0);
  sparse(false, 0, 0);
  sparse(false, 1, 1);
  sparse(false, 0, 2);
  // SpGEMM's steps (count, compute, structure, values): three CSR matrices, the step's buffer.
  auto spgemm = [&](uint8_t op) {
    add(s, true, [&](Request::Builder r) {
      auto m = r.initSparse();
      m.initStream();
      m.setOp(op);
      m.setComputeType(0);
      m.initAlpha().setHost(kj::heapArray<kj::byte>(8));
      m.initBeta().setHost(kj::heapArray<kj::byte>(8));
      auto csr = [&](rgpu::wire::SparseMatrix::Builder x, int64_t rows, int64_t cols, uint64_t at) {
        x.setFormat(0), x.setRows(rows), x.setCols(cols), x.setNnz(4);
        x.setOffsets(relocated(0, at)), x.setIndices(relocated(0, at + 512)), x.setValues(relocated(0, at + 1024));
        x.setOffsetType(2), x.setIndexType(2);
      };
      csr(m.initA(), 16, 12, 0);
      csr(m.initSb(), 12, 10, 2048);
      csr(m.initSc(), 16, 10, 4096);
      if (op != 5) m.setBuffer(relocated(1, 8192)), m.setBufferSize(2048);
    });
  };
  for (uint8_t op = 2; op <= 5; ++op) spgemm(op);
  // cuDNN: a tensor of 4 dimensions packed NCHW at an offset of allocation `a`.
  auto tensor = [&](rgpu::wire::DnnTensor::Builder t, std::initializer_list<int64_t> dims, int a, uint64_t at,
                    int32_t filter_format = -1) {
    t.setType(0);
    auto d = t.initDims(4);
    auto st = t.initStrides(4);
    int64_t stride = 1;
    std::vector<int64_t> v(dims);
    for (int i = 3; i >= 0; --i) d.set(i, v[i]), st.set(i, stride), stride *= v[i];
    t.setPtr(relocated(a, at));
    t.setFilterFormat(filter_format);
  };
  auto dnn = [&](bool size, uint8_t op, auto fill) {
    add(s, !size, [&](Request::Builder r) {
      auto m = size ? r.initDnnSize() : r.initDnn();
      m.initStream();
      m.setOp(op);
      m.setAlpha(1);
      for (auto l : {m.initConvPad(3), m.initConvStride(3), m.initConvDilation(3), m.initPoolWindow(3),
                     m.initPoolPad(3), m.initPoolStride(3)})
        for (unsigned i = 0; i < 3; ++i) l.set(i, 1);
      fill(m);
    });
  };
  auto convolution = [&](rgpu::wire::Dnn::Builder m) {  // x 2x3x8x8, w 4x3x3x3, y 2x4x8x8 (pad 1)
    m.setConvSpatial(2), m.setConvMode(1), m.setGroups(1);
    auto t = m.initTensors(3);
    tensor(t[0], {2, 3, 8, 8}, 0, 0);
    tensor(t[1], {4, 3, 3, 3}, 0, 4096, 0);
    tensor(t[2], {2, 4, 8, 8}, 1, 0);
  };
  dnn(true, 0, convolution);
  dnn(false, 0, convolution);
  dnn(false, 13, [&](rgpu::wire::Dnn::Builder m) {  // max pooling 2x2, stride 2 (window set below)
    m.setPoolSpatial(2);
    m.getPoolWindow().set(0, 2), m.getPoolWindow().set(1, 2), m.getPoolPad().set(0, 0), m.getPoolPad().set(1, 0);
    m.getPoolStride().set(0, 2), m.getPoolStride().set(1, 2);
    auto t = m.initTensors(2);
    tensor(t[0], {2, 3, 8, 8}, 0, 0);
    tensor(t[1], {2, 3, 4, 4}, 1, 0);
  });
  dnn(false, 15, [&](rgpu::wire::Dnn::Builder m) {  // batch normalisation, spatial, training
    m.setBnMode(1), m.setEpsilon(1e-5), m.setFactor(0.1);
    auto t = m.initTensors(8);
    tensor(t[0], {2, 3, 8, 8}, 0, 0);
    tensor(t[1], {2, 3, 8, 8}, 1, 0);
    for (unsigned i = 2; i < 8; ++i) tensor(t[i], {1, 3, 1, 1}, 1, 8192 + 64 * i);
  });
  dnn(false, 18, [&](rgpu::wire::Dnn::Builder m) {  // dropout states seeded, then a forward call
    m.setDropout(0.5f), m.setStates(relocated(1, 16384)), m.setStatesSize(64), m.setSeed(3);
  });
  dnn(false, 19, [&](rgpu::wire::Dnn::Builder m) {
    m.setDropout(0.5f), m.setStates(relocated(1, 16384)), m.setStatesSize(64), m.setSeed(3);
    m.setReserve(relocated(1, 20480)), m.setReserveSize(384);
    auto t = m.initTensors(2);
    tensor(t[0], {2, 3, 8, 8}, 0, 0);
    tensor(t[1], {2, 3, 8, 8}, 0, 32768);
  });
  appendRandSeeds(s);
  // Complex cuBLAS: a Zherk (real scalars) and a Cdotc whose result comes back.
  add(s, true, [](Request::Builder r) {
    auto b = r.initBlas();
    b.initStream();
    b.setOp(rgpu::wire::BlasOp::HERK);
    b.setAType(5), b.setBType(5);
    b.setTransA(2);
    b.setN(8), b.setK(4), b.setLda(8), b.setLdc(8);
    b.setA(relocated(1, 0)), b.setC(relocated(1, 4096));
    double one = 1;
    b.initAlpha().setHost(kj::arrayPtr(reinterpret_cast<const kj::byte*>(&one), 8));
    b.initBeta().setHost(kj::arrayPtr(reinterpret_cast<const kj::byte*>(&one), 8));
  });
  add(s, false, [](Request::Builder r) {
    auto b = r.initBlas();
    b.initStream();
    b.setOp(rgpu::wire::BlasOp::DOTC);
    b.setAType(4), b.setBType(4);
    b.setN(16), b.setIncx(1), b.setIncy(2);
    b.setX(relocated(1, 0)), b.setY(relocated(1, 8192));
  });
  sync(s);
  return s;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s OUT_DIR KERNELS_PTXONLY_FATBIN\n", argv[0]);
    return 2;
  }
  std::ifstream in(argv[2], std::ios::binary);
  std::stringstream fatbin;
  fatbin << in.rdbuf();
  if (fatbin.str().empty()) {
    std::fprintf(stderr, "cannot read %s\n", argv[2]);
    return 1;
  }
  std::string dir = argv[1];
  for (auto& [name, bytes] : {std::pair<std::string, std::string>{"memory.bin", memory()},
                              {"streams.bin", streams()},
                              {"module.bin", module(fatbin.str())},
                              {"devices.bin", devices()},
                              {"lifetimes.bin", lifetimes(fatbin.str())},
                              {"compressed.bin", compressed()},
                              {"graphs.bin", graphs()},
                              {"arrays.bin", arrays()},
                              {"libraries.bin", libraries()}}) {
    std::ofstream out(dir + "/" + name, std::ios::binary);
    out << bytes;
    std::printf("%s: %zu bytes\n", name.c_str(), bytes.size());
  }
  return 0;
}
