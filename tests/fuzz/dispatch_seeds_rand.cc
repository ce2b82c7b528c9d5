// cuRAND's seed records for fuzz_dispatch's libraries.bin (make_dispatch_seeds.cc):
// a generation of each kind of generator as rgpu's libcurand sends one
// (client/rand/curand_api.cc), allocation 1 as the output.
#include <string>

#include "tests/fuzz/seed_records.h"

namespace rgpu::fuzz {

void appendRandSeeds(std::string& s) {
  using Request = wire::Request;
  add(s, true, [](Request::Builder r) {
    auto m = r.initRandFill();
    m.initStream();
    m.setRng(161);
    m.setSeed(5);
    m.setDist(1);
    m.setStddev(1);
    m.setPtr(relocated(1, 0));
    m.setCount(100);
  });
  // A MRG32k3a generation that carries its generators' draw counts, and an MTGP32 one.
  add(s, true, [](Request::Builder r) {
    auto m = r.initRandFill();
    m.initStream();
    m.setRng(121);
    m.setSeed(9);
    m.setDist(3);
    m.setStddev(1);
    m.setPtr(relocated(1, 0));
    m.setCount(64);
    m.setSlot(100);
    m.setCounted(40);
    auto d = m.initDraws(4);
    d.set(0, 7), d.set(1, 40000), d.set(2, 8), d.set(3, 41920);
  });
  add(s, true, [](Request::Builder r) {
    auto m = r.initRandFill();
    m.initStream();
    m.setRng(141);
    m.setSeed(2);
    m.setPosition(49000);
    m.setDist(2);
    m.setPtr(relocated(1, 0));
    m.setCount(300);
  });
  // Poisson values: Philox's table (lambda 6.5) and MTGP32's inversion (lambda 700).
  add(s, true, [](Request::Builder r) {
    auto m = r.initRandFill();
    m.initStream();
    m.setRng(161);
    m.setSeed(4);
    m.setDist(8);
    m.setLambda(6.5);
    m.setPtr(relocated(1, 0));
    m.setCount(50);
  });
  add(s, true, [](Request::Builder r) {
    auto m = r.initRandFill();
    m.initStream();
    m.setRng(141);
    m.setSeed(6);
    m.setDist(8);
    m.setLambda(700);
    m.setPtr(relocated(1, 0));
    m.setCount(20);
  });
  // MT19937: Poisson values of lambda 2500 (its normal approximation in float), inside row 0.
  add(s, true, [](Request::Builder r) {
    auto m = r.initRandFill();
    m.initStream();
    m.setRng(142);
    m.setSeed(8);
    m.setPosition(100);
    m.setDist(8);
    m.setLambda(2500);
    m.setPtr(relocated(1, 0));
    m.setCount(40);
  });
  // XORWOW: Poisson values of lambda 3000 (its generators' own normals), from
  // slot 4097, generators 1 to 4095 holding a kept half (from draws 0 and 1).
  add(s, true, [](Request::Builder r) {
    auto m = r.initRandFill();
    m.initStream();
    m.setRng(101);
    m.setSeed(9);
    m.setPosition(4097);
    m.setSlot(4097);
    m.setCounted(4097);
    m.setDist(8);
    m.setLambda(3000);
    m.setPtr(relocated(1, 0));
    m.setCount(30);
    auto d = m.initDraws(4);
    d.set(0, 4), d.set(1, 1), d.set(2, 2), d.set(3, 4095);
    auto k = m.initKept(4);
    k.set(0, 0), k.set(1, 1), k.set(2, 1), k.set(3, 4095);
  });
  // A scrambled Sobol32 generation of 2 dimensions with its tables (made-up words).
  add(s, true, [](Request::Builder r) {
    auto m = r.initRandFill();
    m.initStream();
    m.setRng(202);
    m.setOffset(3);
    m.setPosition(9);
    m.setDist(4);
    m.setStddev(1);
    m.setPtr(relocated(1, 0));
    m.setCount(40);
    m.setDims(2);
    m.setCallStart(9);
    m.setCallCount(40);
    auto d = m.initDirections(64);
    for (unsigned i = 0; i < 64; ++i) d.set(i, 0x80000000u >> (i % 32));
    auto c = m.initScramble(2);
    c.set(0, 0x12345678u), c.set(1, 0x9abcdef0u);
  });
}

}  // namespace rgpu::fuzz
