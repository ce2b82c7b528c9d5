#include "common/solver_args.h"

#include <algorithm>

namespace rgpu::common::solver {

namespace {

const char* const kOpNames[kOpCount] = {"potrf", "potrs", "getrf", "getrs", "geqrf", "ormqr", "syevd", "gesvd"};

char typeLetter(int32_t t) { return t == kR32F ? 'S' : t == kR64F ? 'D' : t == kC32F ? 'C' : 'Z'; }

Status bad(const std::string& what) { return Status(err::kInvalidValue, what); }

// An m x n column-major matrix with leading dimension ld: its elements' span.
uint64_t span(int64_t m, int64_t n, int64_t ld) {
  if (m <= 0 || n <= 0) return 0;
  return static_cast<uint64_t>(ld) * static_cast<uint64_t>(n - 1) + static_cast<uint64_t>(m);
}

bool validJob(char j) { return j == 'A' || j == 'S' || j == 'O' || j == 'N'; }

// gesvd's U and VT: columns of U and rows of VT kept for a job.
int64_t kept(char job, int64_t all, int64_t thin) { return job == 'A' ? all : job == 'S' ? thin : 0; }

}  // namespace

const char* opName(Op op, int32_t type) {
  static thread_local std::string name;
  const bool cplx = isComplex(type);
  std::string base = kOpNames[static_cast<int>(op) % kOpCount];
  if (cplx && op == Op::kOrmqr) base = "unmqr";
  if (cplx && op == Op::kSyevd) base = "heevd";
  name = std::string("cusolverDn") + typeLetter(type) + base;
  return name.c_str();
}

Status check(const Args& a) {
  if (static_cast<uint8_t>(a.op) >= kOpCount) return bad("unknown cuSOLVER routine " + std::to_string(int(a.op)));
  if (!knownType(a.type)) return bad("data type " + std::to_string(a.type));
  for (int64_t v : {a.m, a.n, a.k, a.nrhs})
    if (v < 0 || v > kMaxDim) return bad("a dimension of " + std::to_string(v));
  for (int64_t v : {a.lda, a.ldb, a.ldu, a.ldvt})
    if (v < 1 || v > kMaxDim) return bad("a leading dimension of " + std::to_string(v));
  if (a.lwork < 0 || a.lwork > kMaxDim) return bad("Lwork " + std::to_string(a.lwork));
  const bool uplo_ok = a.uplo == 0 || a.uplo == 1;
  auto need = [](bool ok, const char* what) { return ok ? Status::ok() : bad(what); };
  switch (a.op) {
    case Op::kPotrf:
      RGPU_TRY(need(uplo_ok, "uplo"));
      return need(a.lda >= std::max<int64_t>(1, a.n), "lda < max(1, n)");
    case Op::kPotrs:
      RGPU_TRY(need(uplo_ok, "uplo"));
      RGPU_TRY(need(a.lda >= std::max<int64_t>(1, a.n), "lda < max(1, n)"));
      return need(a.ldb >= std::max<int64_t>(1, a.n), "ldb < max(1, n)");
    case Op::kGetrf:
    case Op::kGeqrf:
      return need(a.lda >= std::max<int64_t>(1, a.m), "lda < max(1, m)");
    case Op::kGetrs:
      RGPU_TRY(need(a.trans >= 0 && a.trans <= 2, "trans"));
      RGPU_TRY(need(a.lda >= std::max<int64_t>(1, a.n), "lda < max(1, n)"));
      return need(a.ldb >= std::max<int64_t>(1, a.n), "ldb < max(1, n)");
    case Op::kOrmqr: {
      RGPU_TRY(need(a.side == 0 || a.side == 1, "side"));
      // Real Q: N or T; complex Q: N or C (cuSOLVER's rule, as LAPACK's).
      RGPU_TRY(need(a.trans == 0 || a.trans == (isComplex(a.type) ? 2 : 1), "trans"));
      const int64_t nq = a.side == 0 ? a.m : a.n;
      RGPU_TRY(need(a.k <= nq, "k > the order of Q"));
      RGPU_TRY(need(a.lda >= std::max<int64_t>(1, nq), "lda < the order of Q"));
      return need(a.ldb >= std::max<int64_t>(1, a.m), "ldc < max(1, m)");
    }
    case Op::kSyevd:
      RGPU_TRY(need(uplo_ok, "uplo"));
      RGPU_TRY(need(a.jobz == 0 || a.jobz == 1, "jobz"));
      return need(a.lda >= std::max<int64_t>(1, a.n), "lda < max(1, n)");
    case Op::kGesvd: {
      RGPU_TRY(need(validJob(a.jobu) && validJob(a.jobvt), "jobu or jobvt"));
      RGPU_TRY(need(!(a.jobu == 'O' && a.jobvt == 'O'), "jobu and jobvt both 'O'"));
      RGPU_TRY(need(a.m >= a.n, "m < n (cuSOLVER's gesvd wants m >= n)"));
      RGPU_TRY(need(a.lda >= std::max<int64_t>(1, a.m), "lda < max(1, m)"));
      if (a.jobu == 'A' || a.jobu == 'S') RGPU_TRY(need(a.ldu >= std::max<int64_t>(1, a.m), "ldu < max(1, m)"));
      const int64_t vt_rows = kept(a.jobvt, a.n, std::min(a.m, a.n));
      return need(a.ldvt >= std::max<int64_t>(1, vt_rows), "ldvt < the rows of VT");
    }
  }
  return bad("unknown cuSOLVER routine");
}

std::vector<Range> ranges(const Args& a) {
  const uint64_t e = elementBytes(a.type), r = realBytes(a.type);
  const int64_t mn = std::min(a.m, a.n);
  std::vector<Range> out;
  // (Dimensions are below 2^31, so a span is below 2^62 elements; in bytes it
  // may pass 2^64, which no allocation holds: clamped, then refused.)
  auto add = [&](uint64_t ptr, uint64_t elements, uint64_t bytes, const char* what) {
    const unsigned __int128 total = static_cast<unsigned __int128>(elements) * bytes;
    if (elements) out.push_back({ptr, total > UINT64_MAX ? UINT64_MAX : static_cast<uint64_t>(total), what});
  };
  add(a.info, 1, 4, "devInfo");
  if (a.lwork > 0 && a.work) add(a.work, static_cast<uint64_t>(a.lwork), e, "workspace");
  switch (a.op) {
    case Op::kPotrf: add(a.a, span(a.n, a.n, a.lda), e, "A"); break;
    case Op::kPotrs:
    case Op::kGetrs:
      add(a.a, span(a.n, a.n, a.lda), e, "A");
      add(a.b, span(a.n, a.nrhs, a.ldb), e, "B");
      if (a.op == Op::kGetrs && a.ipiv) add(a.ipiv, static_cast<uint64_t>(a.n), 4, "devIpiv");
      break;
    case Op::kGetrf:
      add(a.a, span(a.m, a.n, a.lda), e, "A");
      if (a.ipiv) add(a.ipiv, static_cast<uint64_t>(mn), 4, "devIpiv");
      break;
    case Op::kGeqrf:
      add(a.a, span(a.m, a.n, a.lda), e, "A");
      add(a.tau, static_cast<uint64_t>(mn), e, "TAU");
      break;
    case Op::kOrmqr:
      add(a.a, span(a.side == 0 ? a.m : a.n, a.k, a.lda), e, "A");
      add(a.tau, static_cast<uint64_t>(a.k), e, "tau");
      add(a.b, span(a.m, a.n, a.ldb), e, "C");
      break;
    case Op::kSyevd:
      add(a.a, span(a.n, a.n, a.lda), e, "A");
      add(a.w, static_cast<uint64_t>(a.n), r, "W");
      break;
    case Op::kGesvd:
      add(a.a, span(a.m, a.n, a.lda), e, "A");
      add(a.w, static_cast<uint64_t>(mn), r, "S");
      add(a.u, span(a.m, kept(a.jobu, a.m, mn), a.ldu), e, "U");
      add(a.vt, span(kept(a.jobvt, a.n, mn), a.n, a.ldvt), e, "VT");
      if (a.rwork && mn > 1) add(a.rwork, static_cast<uint64_t>(mn - 1), r, "rwork");
      break;
  }
  return out;
}

void toWire(const Args& a, wire::Solver::Builder b) {
  b.setOp(static_cast<uint8_t>(a.op));
  b.setType(a.type);
  b.setUplo(a.uplo);
  b.setTrans(a.trans);
  b.setSide(a.side);
  b.setJobz(a.jobz);
  b.setJobu(static_cast<uint8_t>(a.jobu));
  b.setJobvt(static_cast<uint8_t>(a.jobvt));
  b.setM(a.m);
  b.setN(a.n);
  b.setK(a.k);
  b.setNrhs(a.nrhs);
  b.setA(a.a);
  b.setLda(a.lda);
  b.setB(a.b);
  b.setLdb(a.ldb);
  b.setIpiv(a.ipiv);
  b.setTau(a.tau);
  b.setW(a.w);
  b.setU(a.u);
  b.setLdu(a.ldu);
  b.setVt(a.vt);
  b.setLdvt(a.ldvt);
  b.setWork(a.work);
  b.setLwork(a.lwork);
  b.setRwork(a.rwork);
  b.setInfo(a.info);
}

Args fromWire(wire::Solver::Reader r) {
  Args a;
  a.op = static_cast<Op>(r.getOp());
  a.type = r.getType();
  a.uplo = r.getUplo();
  a.trans = r.getTrans();
  a.side = r.getSide();
  a.jobz = r.getJobz();
  a.jobu = static_cast<char>(r.getJobu());
  a.jobvt = static_cast<char>(r.getJobvt());
  a.m = r.getM();
  a.n = r.getN();
  a.k = r.getK();
  a.nrhs = r.getNrhs();
  a.a = r.getA();
  a.lda = r.getLda();
  a.b = r.getB();
  a.ldb = r.getLdb();
  a.ipiv = r.getIpiv();
  a.tau = r.getTau();
  a.w = r.getW();
  a.u = r.getU();
  a.ldu = r.getLdu();
  a.vt = r.getVt();
  a.ldvt = r.getLdvt();
  a.work = r.getWork();
  a.lwork = r.getLwork();
  a.rwork = r.getRwork();
  a.info = r.getInfo();
  return a;
}

}  // namespace rgpu::common::solver
