#include "server/sim/ptx/ptx_reconverge.h"

#include <algorithm>

namespace rgpu::server::ptx {
namespace {

bool endsThread(Op op) { return op == Op::kRet || op == Op::kExit || op == Op::kRetFunc || op == Op::kTrap; }

}  // namespace

std::vector<uint32_t> reconvergencePoints(const std::vector<Inst>& code) {
  // Post-dominators by Cooper, Harvey and Kennedy's algorithm on the reversed
  // control-flow graph, with one virtual exit node (index n) after every
  // ret/exit. A call falls through to its next instruction (the callee is its
  // own region, ending in ret). Instruction granularity: kernels are small.
  const uint32_t n = static_cast<uint32_t>(code.size()), exit = n;
  std::vector<std::vector<uint32_t>> succ(n + 1), pred(n + 1);
  auto edge = [&](uint32_t a, uint32_t b) {
    succ[a].push_back(b);
    pred[b].push_back(a);
  };
  for (uint32_t i = 0; i < n; ++i) {
    const Inst& in = code[i];
    uint32_t next = i + 1 < n ? i + 1 : exit;
    bool guarded = in.guard >= 0;
    if (in.op == Op::kBra) {
      edge(i, in.target < n ? in.target : exit);
      if (guarded && next != in.target) edge(i, next);
    } else if (endsThread(in.op)) {
      edge(i, exit);
      if (guarded) edge(i, next);
    } else {
      edge(i, next);
    }
  }
  // Postorder of the reversed graph from the exit (iterative DFS over predecessors).
  constexpr uint32_t kUnseen = UINT32_MAX;
  std::vector<uint32_t> order(n + 1, kUnseen), by_order;
  by_order.reserve(n + 1);
  std::vector<std::pair<uint32_t, size_t>> stack = {{exit, 0}};
  std::vector<bool> seen(n + 1, false);
  seen[exit] = true;
  while (!stack.empty()) {
    auto& [v, k] = stack.back();
    if (k < pred[v].size()) {
      uint32_t p = pred[v][k++];
      if (!seen[p]) {
        seen[p] = true;
        stack.emplace_back(p, 0);
      }
      continue;
    }
    order[v] = static_cast<uint32_t>(by_order.size());
    by_order.push_back(v);
    stack.pop_back();
  }
  std::vector<uint32_t> ipdom(n + 1, kUnseen);
  ipdom[exit] = exit;
  auto intersect = [&](uint32_t a, uint32_t b) {
    while (a != b) {
      while (order[a] < order[b]) a = ipdom[a];
      while (order[b] < order[a]) b = ipdom[b];
    }
    return a;
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t k = by_order.size(); k-- > 0;) {  // reverse postorder, exit first
      uint32_t v = by_order[k];
      if (v == exit) continue;
      uint32_t best = kUnseen;
      for (uint32_t s : succ[v]) {
        if (ipdom[s] == kUnseen) continue;
        best = best == kUnseen ? s : intersect(s, best);
      }
      if (best != kUnseen && ipdom[v] != best) {
        ipdom[v] = best;
        changed = true;
      }
    }
  }
  std::vector<uint32_t> out(n, kNoReconvergence);
  for (uint32_t i = 0; i < n; ++i)
    if (code[i].op == Op::kBra && code[i].guard >= 0 && ipdom[i] != kUnseen && ipdom[i] != exit) out[i] = ipdom[i];
  return out;
}

}  // namespace rgpu::server::ptx
