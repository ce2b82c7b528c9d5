# The rgpu wire protocol.
#
# Every frame on the TLS stream is a fixed 32-byte header (protocol/frame.h), one
# Cap'n Proto message of the struct named by the header's type, and an optional
# raw bulk payload (memcpy data, fatbins) that never passes through a builder.
#
# APPEND-ONLY: ordinals and union members are never renumbered or reused. A call
# that is withdrawn keeps its ordinal forever.
@0xd6465e1a6ec38fd1;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("rgpu::wire");

const protocolVersion :UInt16 = 1;

struct Hello {
  protocolVersion @0 :UInt16;
  clientVersion @1 :Text;
  token @2 :Text;            # optional bearer token (users table); never logged
  hostname @3 :Text;
  pid @4 :UInt32;
  resumeToken @5 :Data;      # session resume: the token the Welcome gave (empty: a new session)
  request @6 :DeviceRequest; # what devices the program needs (pool placement)
  monitor @7 :Bool;          # rgpu-smi: no devices, only poolStatus calls
  resume @8 :Bool;           # a new session that wants resume after a dropped connection
  resumeSession @9 :UInt64;  # with resumeToken: the session to take up again
  received @10 :Ack;         # with resumeToken: the replies and notifications the client already has
  redirected @12 :Bool;      # the pool sent this client here: take it or refuse it, never redirect again
  certProof @11 :Data;       # a client that presented a certificate: its signature over the connection's
                             # exporter value (common/tls.h proveClientKey); the daemon refuses it without
  spanIndex @13 :UInt32;     # with redirected: this session is part `spanIndex` of a program whose devices
                             # the pool spread over several members (Welcome.span); 0 otherwise
  stripe @14 :Bool;          # with resumeToken: not a resume but one more connection of the running session,
                             # to stripe bulk payloads over (common/stripes.h)
  generation @15 :UInt32;    # with stripe: the Welcome.generation of the main connection it joins
}

# Session resume. Each side keeps what the other may not have received: the
# client its requests until the server acknowledges them as dispatched, the
# server its replies and notifications until the client acknowledges them.
# After a dropped connection the client reconnects (within the server's grace
# period), the server says what it dispatched, the client replays the rest by
# sequence number and the server resends what the client lacks.
struct Ack {
  replies @0 :UInt64;        # client: it holds every reply to requests <= this that it waits for
  notifications @1 :UInt64;  # client: it holds every notification <= this
  dispatched @2 :UInt64;     # server: every request <= this has been carried out
  bye @3 :Bool;              # client: an orderly end of the session (no resume)
  stripeReady @4 :UInt32;    # client: it reads stripe connection N now; the server may put pieces on it
}

# A client's device request (client.toml [request]); zeros mean "any".
struct DeviceRequest {
  count @0 :UInt32;              # devices wanted; 0 = every device the user may use
  minMemory @1 :UInt64;          # bytes free on each
  minComputeCapability @2 :UInt32;  # major * 10 + minor
  model @3 :Text;                # glob on the device name, e.g. "*H200*"
  waitMs @4 :UInt32;             # longest wait in the admission queue (the server caps it)
}

struct DeviceInfo {
  name @0 :Text;
  totalMem @1 :UInt64;
  major @2 :Int32;
  minor @3 :Int32;
  multiProcessorCount @4 :Int32;
  uuid @5 :Data;             # 16 bytes
  prop @6 :Data;             # the CUDA 13 cudaDeviceProp, 1008 bytes, as the server's backend filled it
  attributes @7 :List(Int32);  # indexed by cudaDeviceAttr; 0 where unknown
  peerAccess @8 :UInt64;       # bit i: kernels on this device can use device i's memory (peer access)
}

struct Welcome {
  error @0 :Int32;           # 0: accepted; otherwise a cudaError_t and `message` says why
  message @1 :Text;
  protocolVersion @2 :UInt16;
  serverVersion @3 :Text;
  identity @4 :Text;         # the user name the server authenticated
  sessionId @5 :UInt64;
  resumeToken @6 :Data;
  devices @7 :List(DeviceInfo);
  driverVersion @8 :Int32;
  backend @9 :Text;          # "sim" or "cuda"
  limits @10 :Limits;
  resumeGraceMs @11 :UInt32; # 0: no resume for this session; else how long the server waits for the client
  resumed @12 :Bool;         # this Welcome takes up an existing session (devices are not repeated)
  dispatched @13 :UInt64;    # resumed: the last request the server carried out; the client replays the rest
  resumeId @14 :Data;        # 16 random bytes: what a reconnecting client's resume preamble names (unguessable)
  redirect @15 :Text;        # non-empty (error 0, no session): the pool places this client on the member at
                             # this host:port; the client connects there (verifying it as usual), once
  redirectMember @16 :Text;  # that member's name, for messages
  span @17 :List(SpanPart);  # non-empty (error 0, no session): no one member has the devices asked for; the
                             # program takes `count` of them at each of these members, its devices in this
                             # order (one session per member, each Hello redirected with its spanIndex)
  maxStripes @18 :UInt32;    # stripe connections the session may join (0: none; needs resume)
  generation @19 :UInt32;    # which of the session's main connections this is (1, then +1 each resume)
  stripe @20 :UInt32;        # a Welcome on a stripe connection: the index it has from now on (1..16)
}

struct SpanPart {
  member @0 :Text;
  address @1 :Text;          # host:port
  count @2 :UInt32;
}

struct Limits {
  maxBulkBytes @0 :UInt64;   # largest bulk payload of one frame
  maxMessageBytes @1 :UInt32;
  maxParamBytes @2 :UInt32;
}

struct Dim3 { x @0 :UInt32; y @1 :UInt32; z @2 :UInt32; }

# Streams and events are named by client-chosen ids so creating them needs no
# round trip. Stream 0 is the device's legacy default stream.
struct StreamRef { id @0 :UInt32; device @1 :Int32; }

struct Request {
  union {
    noop @0 :Void;                   # asynchronous no-op (benchmarks, keep-alive)
    ping @1 :Void;                   # synchronous no-op
    malloc @2 :Malloc;
    free @3 :Free;
    memcpyHtoD @4 :MemcpyHtoD;       # bulk payload = the bytes
    memcpyDtoH @5 :MemcpyDtoH;       # reply bulk payload = the bytes
    memcpyDtoD @6 :MemcpyDtoD;
    memset @7 :Memset;
    memcpy2D @8 :Memcpy2D;           # H2D: bulk = packed rows; D2H: reply bulk = packed rows
    memset2D @9 :Memset2D;
    streamCreate @10 :StreamCreate;
    streamDestroy @11 :StreamRef;
    streamSynchronize @12 :StreamRef;
    streamQuery @13 :StreamRef;
    streamWaitEvent @14 :StreamWaitEvent;
    eventCreate @15 :EventCreate;
    eventRecord @16 :EventRecord;
    eventSynchronize @17 :EventRef;
    eventQuery @18 :EventRef;
    eventElapsedTime @19 :EventElapsed;
    eventDestroy @20 :EventRef;
    deviceSynchronize @21 :Device;
    deviceReset @22 :Device;
    memGetInfo @23 :Device;
    moduleLoad @24 :ModuleLoad;      # bulk payload = the fatbin
    moduleUnload @25 :ModuleUnload;
    functionRegister @26 :FunctionRegister;
    varRegister @27 :VarRegister;
    launchKernel @28 :LaunchKernel;
    funcGetAttributes @29 :FunctionRef;
    funcSetAttribute @30 :FuncSetAttribute;
    occupancy @31 :Occupancy;
    symbolAddress @32 :SymbolRef;
    hostFuncEnqueue @33 :HostFuncEnqueue;
    hostFuncDone @34 :HostFuncDone;
    memcpyPeer @35 :MemcpyPeer;
    pointerAttributes @36 :PointerAttributes;
    poolStatus @37 :Void;        # rgpu-smi: devices and sessions (all of them for admins)
    blas @38 :BlasCall;          # cuBLAS (client/blas): stream-ordered; synchronous only for a result to the host
    ltMatmul @39 :LtMatmul;      # cublasLtMatmul
    ltHeuristic @40 :LtMatmul;   # cublasLtMatmulAlgoGetHeuristic: the reply lists algorithms
    setLimit @41 :SetLimit;      # cudaDeviceSetLimit of a limit the device enforces (printf FIFO)
    graphCreate @42 :GraphCreate;  # an instantiated CUDA graph, kept by the server under a client id
    graphLaunch @43 :GraphLaunch;  # bulk = the bytes of its host-to-device nodes, in node order;
                                   # reply (only when it has device-to-host nodes) bulk = theirs
    graphDestroy @44 :GraphRef;
    conditionalHandleCreate @45 :Device;  # cudaGraphConditionalHandleCreate: reply value = the handle
    arrayCreate @46 :ArrayCreate;    # cudaMallocArray, cudaMalloc3DArray, cudaMallocMipmappedArray: reply value = its handle
    arrayDestroy @47 :ObjectRef;     # cudaFreeArray, cudaFreeMipmappedArray
    copy3D @48 :Copy3D;              # copies to, from and between arrays and pitched memory;
                                     # from the host: bulk = the packed bytes; to the host: reply bulk = them
    textureCreate @49 :TextureCreate;  # cudaCreateTextureObject: reply value = the object kernels take
    textureDestroy @50 :ObjectRef;
    surfaceCreate @51 :SurfaceCreate;  # cudaCreateSurfaceObject: reply value = the object kernels take
    surfaceDestroy @52 :ObjectRef;
    poolMembers @53 :Void;           # rgpu-smi --pool: the members of the pool this server is one of
    sessionMove @54 :SessionMove;    # rgpu-smi --migrate (admins): reply message = what the move took
    randFill @55 :RandFill;          # cuRAND (client/rand): a device generator's values, in stream order
    fftPlan @56 :FftPlan;            # cuFFT (client/fft): a plan's work area (reply value = bytes)
    fftExec @57 :FftExec;            # cuFFT: one transform, in stream order
    fftRelease @58 :FftRelease;      # cuFFT: a plan destroyed (the backend drops what it made for it)
    solver @59 :Solver;              # cuSOLVER (client/solver): one dense routine, in stream order
    solverBufferSize @60 :Solver;    # cuSOLVER: its workspace in elements (reply value)
    sparse @61 :Sparse;              # cuSPARSE (client/sparse): SpMV or SpMM, in stream order
    sparseBufferSize @62 :Sparse;    # cuSPARSE: its external buffer in bytes (reply value)
    dnn @63 :Dnn;                    # cuDNN (client/dnn): one legacy-API operation, in stream order
    dnnSize @64 :Dnn;                # cuDNN: a workspace, states or reserve size in bytes (reply value)
  }
}

# CUDA graphs (client/graph.h). The client flattens a graph (child graphs
# inlined, disabled nodes dropped) into its nodes in an order that respects
# every dependency, and the server runs them in that order on the launch's
# stream: one message per launch however many nodes the graph has.
struct GraphCreate {
  id @0 :UInt32;             # client-chosen; a second graphCreate with the same id replaces it (cudaGraphExecUpdate)
  device @1 :Int32;
  nodes @2 :List(GraphNode);
  append @3 :Bool;           # more nodes of the graph last sent under this id (one too large for a message)
}
struct GraphNode {
  union {
    request @0 :Request;       # a stream-ordered device-side call (launch, copy, memset, event, cuBLAS);
                               # its stream fields are ignored: it runs on the launch's stream
    hostToDevice @1 :HostCopy; # the launch's bulk carries the bytes (read when the program launches)
    deviceToHost @2 :HostCopy; # the launch's reply carries the bytes
    hostFunc @3 :Void;         # a host node: the launch names the callback id it runs as
    empty @4 :Void;
    conditional @5 :GraphConditional;   # its bodies' nodes follow it, body after body
    conditionalReset @6 :ConditionalReset;  # cudaGraphCondAssignDefault: the value at the start of its graph
  }
}
# A conditional node: when the stream reaches it, its handle's value picks
# what runs: if (bodies[0] when non-zero, else bodies[1] if there is one),
# while (bodies[0] again and again while non-zero), switch (bodies[value], if
# there is one). `bodies` counts each body's nodes, nested ones included.
enum ConditionalType { if @0; while @1; switch @2; }
struct GraphConditional {
  handle @0 :UInt64;
  type @1 :ConditionalType;
  bodies @2 :List(UInt64);
}
struct ConditionalReset { handle @0 :UInt64; value @1 :UInt32; }
struct HostCopy { device @0 :UInt64; size @1 :UInt64; }
struct GraphLaunch {
  id @0 :UInt32;
  stream @1 :StreamRef;
  hostFuncs @2 :List(UInt64);  # one host callback id per hostFunc node, in node order
}
struct GraphRef { id @0 :UInt32; }

# A cuRAND host-API generation (common/curand_cpu.h): `count` values of
# distribution `dist` (common::curand::Dist) from position `position` of the
# generator (rng, seed, offset), written to device memory at `ptr`. The
# client keeps the generator; each request says all there is to it.
struct RandFill {
  stream @0 :StreamRef;
  rng @1 :Int32;            # curandRngType_t
  seed @2 :UInt64;
  offset @3 :UInt64;
  position @4 :UInt64;
  dist @5 :UInt8;
  mean @6 :Float64;
  stddev @7 :Float64;
  ptr @8 :UInt64;
  count @9 :UInt64;
  # (Of the orderings only XORWOW's SEEDED is sent: BEST, DEFAULT and LEGACY are one layout.)
  # Generators of slots (common::curand::SlotHistory): the slot of the first
  # value, and each generator's draws at slot `counted`, as (draws,
  # generators) pairs in generator order (empty: each one's start at the offset).
  slot @10 :UInt64;
  counted @11 :UInt64;
  draws @12 :List(UInt64);
  # Sobol (common/curand_sobol.cc): the dimensions, the whole call, and
  # NVIDIA's direction vectors and scramble constants of those dimensions.
  dims @13 :UInt32;
  callStart @14 :UInt64;
  callCount @15 :UInt64;
  directions @16 :List(UInt32);
  scramble @17 :List(UInt32);
  lambda @18 :Float64;      # Poisson (dist kPoisson)
  # XORWOW and MRG32k3a, Poisson of lambda >= 2000: each generator's kept
  # half of a pair of normals at slot `counted`, 1 + the draw its pair began
  # at (0: none), as (value, generators) pairs like `draws` (empty: none).
  kept @19 :List(UInt64);
  seeded @20 :Bool;         # XORWOW's SEEDED ordering (common::curand::kSeededStride)
}

# A cuFFT plan (common/fft_plan.h): the client keeps it; each request says
# all there is to it. `plan` is the client's name for it (unique in its
# session), which the CUDA backend keys NVIDIA's plan of it by.
struct FftDesc {
  type @0 :Int32;           # cufftType
  rank @1 :Int32;
  n @2 :List(Int64);
  advanced @3 :Bool;        # inembed/onembed given (else the basic layout)
  inembed @4 :List(Int64);
  onembed @5 :List(Int64);
  istride @6 :Int64;
  idist @7 :Int64;
  ostride @8 :Int64;
  odist @9 :Int64;
  batch @10 :Int64;
}
struct FftPlan {
  device @0 :Int32;
  plan @1 :UInt64;
  desc @2 :FftDesc;
}
struct FftExec {
  stream @0 :StreamRef;
  plan @1 :UInt64;
  desc @2 :FftDesc;
  input @3 :UInt64;
  output @4 :UInt64;        # == input: in place
  direction @5 :Int32;      # CUFFT_FORWARD (-1) or CUFFT_INVERSE (1); C2C and Z2Z only
  work @6 :UInt64;          # the plan's work area (0: none)
  workSize @7 :UInt64;
}
struct FftRelease {
  plan @0 :UInt64;
  device @1 :Int32;         # the plan's
}

# A cuSOLVER dense call (common/solver_args.h): the handle is the client's;
# the call carries its stream and every argument.
struct Solver {
  stream @0 :StreamRef;
  op @1 :UInt8;             # common::solver::Op
  type @2 :Int32;           # cudaDataType_t
  uplo @3 :Int32;
  trans @4 :Int32;
  side @5 :Int32;
  jobz @6 :Int32;
  jobu @7 :UInt8;
  jobvt @8 :UInt8;
  m @9 :Int64;
  n @10 :Int64;
  k @11 :Int64;
  nrhs @12 :Int64;
  a @13 :UInt64;
  lda @14 :Int64;
  b @15 :UInt64;
  ldb @16 :Int64;
  ipiv @17 :UInt64;
  tau @18 :UInt64;
  w @19 :UInt64;
  u @20 :UInt64;
  ldu @21 :Int64;
  vt @22 :UInt64;
  ldvt @23 :Int64;
  work @24 :UInt64;
  lwork @25 :Int64;
  rwork @26 :UInt64;
  info @27 :UInt64;
}

# A cuSPARSE generic-API call (common/sparse_args.h): handle and
# descriptors are the client's; the call carries them whole.
struct Sparse {
  stream @0 :StreamRef;
  op @1 :UInt8;             # common::sparse::Op
  opA @2 :Int32;
  opB @3 :Int32;
  alpha @4 :BlasScalar;
  beta @5 :BlasScalar;
  computeType @6 :Int32;
  alg @7 :Int32;
  a @8 :SparseMatrix;
  b @9 :DenseMatrix;        # SpMV: x
  c @10 :DenseMatrix;       # SpMV: y
  buffer @11 :UInt64;
  bufferSize @12 :UInt64;
  sb @13 :SparseMatrix;     # SpGEMM: B
  sc @14 :SparseMatrix;     # SpGEMM: C
}
struct SparseMatrix {
  format @0 :UInt8;         # common::sparse::Format
  rows @1 :Int64;
  cols @2 :Int64;
  nnz @3 :Int64;
  offsets @4 :UInt64;
  indices @5 :UInt64;
  values @6 :UInt64;
  offsetType @7 :Int32;
  indexType @8 :Int32;
  base @9 :Int32;
  valueType @10 :Int32;
  block @11 :Int64;         # Blocked-ELL: the block size
  ellCols @12 :Int64;       # Blocked-ELL: columns of the blocks' values
}
struct DenseMatrix {
  rows @0 :Int64;
  cols @1 :Int64;
  ld @2 :Int64;
  values @3 :UInt64;
  valueType @4 :Int32;
  order @5 :Int32;
}

# A cuDNN legacy-API call (common/dnn_args.h): handle and descriptors are
# the client's; the call carries them whole, tensors in the operation's order.
struct Dnn {
  stream @0 :StreamRef;
  op @1 :UInt8;             # common::dnn::Op
  query @2 :UInt8;          # dnnSize: common::dnn::Query
  alpha @3 :Float64;
  beta @4 :Float64;
  alpha2 @5 :Float64;
  beta2 @6 :Float64;
  tensors @7 :List(DnnTensor);
  convSpatial @8 :Int32;
  convPad @9 :List(Int32);
  convStride @10 :List(Int32);
  convDilation @11 :List(Int32);
  convMode @12 :Int32;
  computeType @13 :Int32;
  groups @14 :Int32;
  mathType @15 :Int32;
  algo @16 :Int32;
  poolMode @17 :Int32;
  poolNan @18 :Int32;
  poolSpatial @19 :Int32;
  poolWindow @20 :List(Int32);
  poolPad @21 :List(Int32);
  poolStride @22 :List(Int32);
  actMode @23 :Int32;
  actNan @24 :Int32;
  actCoef @25 :Float64;
  swishBeta @26 :Float64;
  softmaxAlgo @27 :Int32;
  softmaxMode @28 :Int32;
  tensorOp @29 :Int32;
  tensorOpType @30 :Int32;
  bnMode @31 :Int32;
  epsilon @32 :Float64;
  factor @33 :Float64;
  dropout @34 :Float32;
  states @35 :UInt64;
  statesSize @36 :UInt64;
  seed @37 :UInt64;
  workspace @38 :UInt64;
  workspaceSize @39 :UInt64;
  reserve @40 :UInt64;
  reserveSize @41 :UInt64;
  reduceOp @42 :Int32;      # cudnnReduceTensor: cudnnReduceTensorOp_t
  reduceType @43 :Int32;
  reduceIndices @44 :Int32; # whether MIN/MAX/AMAX write 32-bit indices
  indices @45 :UInt64;
  indicesSize @46 :UInt64;
  lrnN @47 :Int32;          # LRN across channels
  lrnAlpha @48 :Float64;
  lrnBeta @49 :Float64;
  lrnK @50 :Float64;
}
struct DnnTensor {
  type @0 :Int32;           # cudnnDataType_t
  dims @1 :List(Int64);
  strides @2 :List(Int64);  # in elements
  ptr @3 :UInt64;
  filterFormat @4 :Int32;   # a filter's cudnnTensorFormat_t; -1 for a tensor
}

# cuBLAS. Handles live in the client; each call carries what the server needs
# (stream, pointer and math mode, workspace). Types are cudaDataType_t and
# cublasComputeType_t values (common/blas_types.h).
enum BlasOp {
  axpy @0; dot @1; nrm2 @2; scal @3; asum @4; iamax @5; iamin @6; copy @7; swap @8;
  gemv @9; ger @10;
  gemm @11; gemmStridedBatched @12; gemmBatched @13;
  geam @14; dgmm @15; trsm @16; syrk @17;
  trmm @18; symm @19; syr2k @20;
  getrfBatched @21; getrsBatched @22; getriBatched @23; matinvBatched @24; geqrfBatched @25;
  herk @26; her2k @27; hemm @28;   # complex only: Hermitian rank-k, rank-2k, Hermitian times general
  dotc @29; gerc @30;              # complex only: conjugated dot product, conjugated rank-1 update
  trmv @31; trsv @32; symv @33; hemv @34;   # level 2 (hemv: complex only)
}

# alpha or beta: its bytes (host pointer mode) or its device address.
struct BlasScalar {
  union {
    host @0 :Data;
    device @1 :UInt64;
  }
}

struct BlasCall {
  stream @0 :StreamRef;
  op @1 :BlasOp;
  aType @2 :Int32;          # A, or x (level 1 and 2)
  bType @3 :Int32;          # B, or y
  cType @4 :Int32;          # C (complex scal: alpha's type, real for Csscal and Zdscal)
  computeType @5 :Int32;
  transA @6 :Int32;         # cublasOperation_t
  transB @7 :Int32;
  m @8 :Int64;
  n @9 :Int64;
  k @10 :Int64;
  alpha @11 :BlasScalar;
  beta @12 :BlasScalar;
  a @13 :UInt64;            # gemmBatched: a device array of batchCount pointers
  lda @14 :Int64;
  strideA @15 :Int64;
  b @16 :UInt64;
  ldb @17 :Int64;
  strideB @18 :Int64;
  c @19 :UInt64;
  ldc @20 :Int64;
  strideC @21 :Int64;
  batchCount @22 :Int64;
  x @23 :UInt64;
  incx @24 :Int64;
  y @25 :UInt64;
  incy @26 :Int64;
  result @27 :UInt64;       # dot, nrm2, asum, iamax, iamin: its device address; 0: the reply's bulk carries it
  mathMode @28 :UInt32;     # cublasMath_t
  workspace @29 :UInt64;    # cublasSetWorkspace: device memory the library may use (0: its own)
  workspaceSize @30 :UInt64;
  result64 @31 :Bool;       # iamax, iamin of the _64 API: an int64_t index (else int)
  side @32 :Int32;          # dgmm, trsm, trmm, symm: cublasSideMode_t
  uplo @33 :Int32;          # trsm, trmm, syrk, syr2k, symm: cublasFillMode_t
  diag @34 :Int32;          # trsm, trmm: cublasDiagType_t
}

# A cuBLASLt matrix layout and where the matrix is.
struct LtMatrix {
  ptr @0 :UInt64;
  type @1 :Int32;           # cudaDataType_t
  rows @2 :UInt64;
  cols @3 :UInt64;
  ld @4 :Int64;
  order @5 :Int32;          # cublasLtOrder_t: 0 column-major, 1 row-major
  batchCount @6 :Int32;
  batchStride @7 :Int64;    # elements
}

struct LtMatmul {
  stream @0 :StreamRef;
  computeType @1 :Int32;
  scaleType @2 :Int32;      # type of alpha and beta
  pointerMode @3 :Int32;    # cublasLtPointerMode_t: 0 host, 1 device
  transA @4 :Int32;
  transB @5 :Int32;
  epilogue @6 :UInt32;      # cublasLtEpilogue_t
  bias @7 :UInt64;          # bias (BIAS epilogues) or bias gradient (BGRAD epilogues)
  biasType @8 :Int32;
  biasBatchStride @9 :Int64;
  aux @10 :UInt64;          # RELU bit mask or GELU input (the *_AUX and D* epilogues)
  auxLd @11 :Int64;
  auxBatchStride @12 :Int64;
  auxType @13 :Int32;
  alpha @14 :BlasScalar;
  beta @15 :BlasScalar;
  a @16 :LtMatrix;
  b @17 :LtMatrix;
  c @18 :LtMatrix;
  d @19 :LtMatrix;
  workspace @20 :UInt64;
  workspaceSize @21 :UInt64;
  algo @22 :Data;           # a cublasLtMatmulAlgo_t from ltHeuristic (64 bytes); empty: the server picks
  requestedAlgos @23 :UInt32;  # ltHeuristic: at most this many
  maxWorkspace @24 :UInt64;    # ltHeuristic: the preference's CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES
}

struct LtAlgo {
  algo @0 :Data;            # cublasLtMatmulAlgo_t, 64 bytes
  workspaceSize @1 :UInt64;
  wavesCount @2 :Float32;
}

struct Malloc {
  device @0 :Int32; size @1 :UInt64;
  # cudaMallocPitch: rows of pitchWidth bytes, pitchHeight rows, at a pitch the
  # server chooses (reply: pitched); size is ignored then.
  pitchWidth @2 :UInt64; pitchHeight @3 :UInt64;
}
struct Pitched { ptr @0 :UInt64; pitch @1 :UInt64; }

# CUDA arrays, textures and surfaces (docs/architecture.md, "Arrays, textures
# and surfaces"). An array is named by the handle its arrayCreate returned and
# a mipmap level (0 for a plain array); every position and width is in bytes
# (the client converts elements), heights in rows, depths in slices (3D depth,
# layers, cube faces).
struct ChannelFormat { x @0 :Int32; y @1 :Int32; z @2 :Int32; w @3 :Int32; kind @4 :Int32; }  # cudaChannelFormatDesc
struct ArrayCreate {
  device @0 :Int32;
  format @1 :ChannelFormat;
  width @2 :UInt64;          # elements
  height @3 :UInt64;         # 0: a 1D array
  depth @4 :UInt64;          # 0: not 3D; layered: layers; cubemap: 6 (layered cubemap: 6 x cubes)
  flags @5 :UInt32;          # cudaArrayLayered, cudaArraySurfaceLoadStore, cudaArrayCubemap, cudaArrayTextureGather
  levels @6 :UInt32;         # cudaMallocMipmappedArray: its levels; 0: a plain array
}
struct ObjectRef {
  handle @0 :UInt64;
  device @1 :Int32;  # a texture or surface object's device: two devices' drivers may give the same value
}
struct CopySide {
  union {
    host @0 :Void;           # the request's bulk (source) or the reply's (destination), packed
    device @1 :UInt64;       # pitched device memory at this address
    array @2 :UInt64;        # an array's handle
  }
  level @3 :UInt32;          # array: the mipmap level
  pitch @4 :UInt64;          # device: bytes between rows
  rows @5 :UInt64;           # device: rows between slices
  x @6 :UInt64; y @7 :UInt64; z @8 :UInt64;  # where the copy starts (x in bytes)
}
struct Copy3D {
  src @0 :CopySide;
  dst @1 :CopySide;
  width @2 :UInt64;          # bytes
  height @3 :UInt64;
  depth @4 :UInt64;
  stream @5 :StreamRef;
}
enum TextureResource { array @0; mipmappedArray @1; linear @2; pitch2D @3; }
struct TextureCreate {
  device @0 :Int32;
  resource @1 :TextureResource;
  handle @2 :UInt64;         # array, mipmappedArray: the array
  level @3 :UInt32;          # array: the level it is of a mipmapped array (cudaGetMipmappedArrayLevel)
  ptr @4 :UInt64;            # linear, pitch2D: device memory
  format @5 :ChannelFormat;  # linear, pitch2D
  size @6 :UInt64;           # linear: bytes
  width @7 :UInt64;          # pitch2D: elements
  height @8 :UInt64;
  pitch @9 :UInt64;
  # cudaTextureDesc
  addressMode @10 :List(Int32);  # 3
  filterMode @11 :Int32;
  readMode @12 :Int32;
  sRGB @13 :Bool;
  borderColor @14 :List(Float32);  # 4
  normalizedCoords @15 :Bool;
  maxAnisotropy @16 :UInt32;
  mipmapFilterMode @17 :Int32;
  mipmapLevelBias @18 :Float32;
  minMipmapLevelClamp @19 :Float32;
  maxMipmapLevelClamp @20 :Float32;
  disableTrilinearOptimization @21 :Bool;
  seamlessCubemap @22 :Bool;
}
struct SurfaceCreate { array @0 :UInt64; level @1 :UInt32; }
struct Free { ptr @0 :UInt64; }
struct MemcpyHtoD { dst @0 :UInt64; size @1 :UInt64; stream @2 :StreamRef; }
struct MemcpyDtoH { src @0 :UInt64; size @1 :UInt64; stream @2 :StreamRef; }
struct MemcpyDtoD { dst @0 :UInt64; src @1 :UInt64; size @2 :UInt64; stream @3 :StreamRef; }
struct Memset { dst @0 :UInt64; value @1 :UInt8; size @2 :UInt64; stream @3 :StreamRef; }
struct Memcpy2D {
  # Direction: 1 = H2D (device side is dst), 2 = D2H (device side is src), 3 = D2D.
  kind @0 :UInt8;
  dst @1 :UInt64; dpitch @2 :UInt64;
  src @3 :UInt64; spitch @4 :UInt64;
  width @5 :UInt64; height @6 :UInt64;
  stream @7 :StreamRef;
}
struct Memset2D {
  dst @0 :UInt64; pitch @1 :UInt64; value @2 :UInt8; width @3 :UInt64; height @4 :UInt64; stream @5 :StreamRef;
  # A graph's memset node of 2- or 4-byte elements: `pattern` repeated; width
  # stays in bytes (a multiple of the element size). 0 or 1: bytes of `value`.
  elementSize @6 :UInt8;
  pattern @7 :UInt32;
}
struct StreamCreate { stream @0 :StreamRef; flags @1 :UInt32; priority @2 :Int32; }
struct StreamWaitEvent { stream @0 :StreamRef; event @1 :UInt32; flags @2 :UInt32; }
struct EventRef { id @0 :UInt32; }
struct EventCreate { id @0 :UInt32; device @1 :Int32; flags @2 :UInt32; }
struct EventRecord { id @0 :UInt32; stream @1 :StreamRef; }
struct EventElapsed { start @0 :UInt32; end @1 :UInt32; }
struct Device { device @0 :Int32; }
struct ModuleLoad { id @0 :UInt32; device @1 :Int32; }
struct ModuleUnload { id @0 :UInt32; }
struct FunctionRegister { id @0 :UInt32; module @1 :UInt32; name @2 :Text; }
struct VarRegister { id @0 :UInt32; module @1 :UInt32; name @2 :Text; size @3 :UInt64; constant @4 :Bool; }
struct FunctionRef { id @0 :UInt32; }
struct FuncSetAttribute { id @0 :UInt32; attr @1 :Int32; value @2 :Int32; }
struct Occupancy { id @0 :UInt32; blockSize @1 :Int32; dynamicSmem @2 :UInt64; flags @3 :UInt32; }
struct SymbolRef { id @0 :UInt32; }
struct LaunchKernel {
  function @0 :UInt32;
  grid @1 :Dim3;
  block @2 :Dim3;
  sharedMem @3 :UInt64;
  stream @4 :StreamRef;
  params @5 :Data;           # packed exactly as the kernel's parameter block
  cooperative @6 :Bool;      # cudaLaunchCooperativeKernel: every block resident at once (grid-wide sync)
  cluster @7 :Dim3;          # cudaLaunchAttributeClusterDimension; unset or 0s: the kernel's own (__cluster_dims__) or none
}
struct HostFuncEnqueue { id @0 :UInt64; stream @1 :StreamRef; }
struct HostFuncDone { id @0 :UInt64; }
struct SetLimit { device @0 :Int32; limit @1 :Int32; value @2 :UInt64; }  # limit: a cudaLimit
# Moves a running session to a new worker (docs/migration.md); `member`: ""
# or this server's own [cluster] name (moving between members is not built).
struct SessionMove { session @0 :UInt64; member @1 :Text; }
struct MemcpyPeer {
  dst @0 :UInt64; dstDevice @1 :Int32; src @2 :UInt64; srcDevice @3 :Int32; size @4 :UInt64; stream @5 :StreamRef;
  # cudaMemcpyPeer (not ...Async): ordered with all earlier and later work of
  # the legacy streams of the stream's device, srcDevice and dstDevice.
  serialize @6 :Bool;
}
struct PointerAttributes { ptr @0 :UInt64; }

struct FuncAttributes {
  sharedSizeBytes @0 :UInt64;
  constSizeBytes @1 :UInt64;
  localSizeBytes @2 :UInt64;
  maxThreadsPerBlock @3 :Int32;
  numRegs @4 :Int32;
  ptxVersion @5 :Int32;
  binaryVersion @6 :Int32;
  cacheModeCA @7 :Int32;
  maxDynamicSharedSizeBytes @8 :Int32;
  preferredShmemCarveout @9 :Int32;
  clusterDimMustBeSet @10 :Int32;            # the kernel runs in clusters only
  requiredClusterWidth @11 :Int32;           # __cluster_dims__ (0: none)
  requiredClusterHeight @12 :Int32;
  requiredClusterDepth @13 :Int32;
  nonPortableClusterSizeAllowed @14 :Int32;
  clusterSchedulingPolicyPreference @15 :Int32;
}

struct Reply {
  # cudaError_t of this call.
  error @0 :Int32;
  # The first error of an earlier asynchronous call not yet reported (0: none).
  # CUDA reports asynchronous errors at the next synchronising call; so do we.
  asyncError @1 :Int32;
  message @2 :Text;          # human-readable detail when error != 0
  union {
    none @3 :Void;
    ptr @4 :UInt64;
    memInfo @5 :MemInfo;
    elapsedMs @6 :Float32;
    funcAttributes @7 :FuncAttributes;
    value @8 :Int64;          # occupancy, query results
    symbol @9 :Symbol;
    pointer @10 :PointerInfo;
    poolStatus @11 :PoolStatus;
    ltAlgos @12 :List(LtAlgo);
    pitched @13 :Pitched;
    poolMembers @15 :PoolMembers;
  }
  # A cuBLAS call's failure: its cublasStatus_t (error is then a non-sticky
  # CUDA error standing for it, common/status.h); 0 otherwise.
  blasStatus @14 :Int32;
  # A request with the timed flag (protocol/frame.h kFlagTimed): when the
  # server had read it whole, started its handler, and built this reply
  # (CLOCK_MONOTONIC ns, comparable with the client's on one host).
  serverTimes @16 :List(UInt64);
}

# A pool of servers (docs/pool.md), as the member asked last read it from etcd.
struct PoolMembers {
  members @0 :List(PoolMember);
}
struct PoolMember {
  name @0 :Text;
  address @1 :Text;            # host:port clients are sent to
  state @2 :Text;              # ready | draining
  devices @3 :List(PoolDevice);  # memoryUsed: total - free as the member last wrote it
  sessions @4 :UInt32;
  queued @5 :UInt32;
}

struct PoolStatus {
  devices @0 :List(PoolDevice);
  sessions @1 :List(PoolSession);
  queued @2 :UInt32;           # requests waiting in the admission queue
}

struct PoolDevice {
  index @0 :UInt32;
  name @1 :Text;
  uuid @2 :Text;
  memoryTotal @3 :UInt64;
  memoryUsed @4 :UInt64;       # allocated by rgpu sessions
  utilization @5 :Int32;       # percent; -1 unknown
  temperature @6 :Int32;       # Celsius; -1 unknown
  powerMw @7 :Int32;           # -1 unknown
  sessions @8 :UInt32;
  computeCapability @9 :UInt32;  # major * 10 + minor
}

struct PoolSession {
  id @0 :UInt64;
  user @1 :Text;
  host @2 :Text;
  pid @3 :UInt32;
  address @4 :Text;
  devices @5 :List(UInt32);    # physical device indices
  memory @6 :UInt64;           # bytes allocated, all devices
  priority @7 :Text;
  gpuTimeNs @8 :UInt64;
  calls @9 :UInt64;
  state @10 :Text;             # running | queued
  seconds @11 :UInt64;         # since admission (or since queued)
}

struct MemInfo { free @0 :UInt64; total @1 :UInt64; }
struct Symbol {
  address @0 :UInt64;
  size @1 :UInt64;
  # A __managed__ variable the backend packed with the module's others: the
  # managed allocation holding them, which the client pages whole (0: none).
  managedBase @2 :UInt64;
  managedSize @3 :UInt64;
}
struct PointerInfo { device @0 :Int32; base @1 :UInt64; size @2 :UInt64; }

# Server-initiated messages.
struct Notify {
  union {
    hostFuncReady @0 :UInt64;  # run host function #id now; answer with hostFuncDone
    goodbye @1 :Text;          # the server is closing this session, and why
    output @2 :Data;           # device printf output of a finished launch: the client writes it to stdout
    graphOutput @4 :GraphOutput;  # the bulk: one device-to-host node's bytes of a graph launch
  }
  goodbyeError @3 :Int32;      # with goodbye: the cudaError_t every later call gets (0: cudaErrorDevicesUnavailable)
}
# A device-to-host node of graph launch `call` (its request's sequence number)
# that a host function of the launch runs after: its bytes land before the
# client is asked to run the function, not with the launch's reply (which
# carries zeros in their place). `offset`: where the node's bytes start among
# the launch's device-to-host bytes, in node order.
struct GraphOutput {
  call @0 :UInt64;
  offset @1 :UInt64;
}
