# Third-party dependencies, all from Debian packages (see scripts/setup.sh).
find_package(Threads REQUIRED)
find_package(OpenSSL 3.0 REQUIRED COMPONENTS SSL Crypto)
find_package(PkgConfig REQUIRED)

# Standalone Asio is header-only and ships no CMake config.
find_path(ASIO_INCLUDE_DIR asio.hpp REQUIRED)
add_library(rgpu_asio INTERFACE)
target_include_directories(rgpu_asio SYSTEM INTERFACE ${ASIO_INCLUDE_DIR})
# ASIO_DISABLE_STD_ALIGNED_ALLOC: Asio picks aligned_alloc or operator new for
# its handler memory by whether a libstdc++ header came first, so translation
# units could disagree on how to free it (ASan reports the mismatch): one choice.
target_compile_definitions(rgpu_asio INTERFACE ASIO_STANDALONE ASIO_NO_DEPRECATED ASIO_DISABLE_STD_ALIGNED_ALLOC)
target_link_libraries(rgpu_asio INTERFACE Threads::Threads OpenSSL::SSL OpenSSL::Crypto)

find_package(CapnProto 0.9 CONFIG REQUIRED)
pkg_check_modules(LZ4 REQUIRED IMPORTED_TARGET liblz4>=1.9)
pkg_check_modules(ZSTD REQUIRED IMPORTED_TARGET libzstd>=1.4)
# XXH3-128: the hashes pre-copy compares device memory by (docs/migration.md).
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash>=0.8)
# The sim backend's cuBLAS (libopenblas-dev: cblas.h and the pthread build).
pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET openblas>=0.3)
# The sim backend's cuFFT (libfftw3-dev: single and double precision).
pkg_check_modules(FFTW REQUIRED IMPORTED_TARGET fftw3f>=3.3 fftw3>=3.3)
# sd_notify and the journal (server only: the client libraries never link it).
pkg_check_modules(SYSTEMD REQUIRED IMPORTED_TARGET libsystemd>=246)
# The Kubernetes manifests' test reads YAML (tests only).
pkg_check_modules(YAML_CPP REQUIRED IMPORTED_TARGET yaml-cpp>=0.6)
find_package(CLI11 2.1 CONFIG REQUIRED)
find_package(tomlplusplus 3.3 CONFIG REQUIRED)
find_package(spdlog 1.10 CONFIG REQUIRED)
find_package(nlohmann_json 3.10 CONFIG REQUIRED)  # etcd's JSON gateway (server/cluster/), the accounting log (common/accounting.h)

# CUDA toolkit: headers for the client library (prototype checking) and the
# device-property layout; nvcc for end-to-end tests.
set(RGPU_CUDA_HOME "$ENV{CUDA_HOME}" CACHE PATH "CUDA toolkit root")
if(NOT RGPU_CUDA_HOME)
  set(RGPU_CUDA_HOME "/usr/local/cuda")
endif()
find_path(CUDA_RUNTIME_INCLUDE_DIR cuda_runtime_api.h
  HINTS "${RGPU_CUDA_HOME}/include" REQUIRED)
find_program(RGPU_NVCC nvcc HINTS "${RGPU_CUDA_HOME}/bin")
add_library(rgpu_cuda_headers INTERFACE)
target_include_directories(rgpu_cuda_headers SYSTEM INTERFACE ${CUDA_RUNTIME_INCLUDE_DIR})

# The PTX JIT's plugin (server/CMakeLists.txt): LLVM 14's shared library
# (llvm-14-dev). Without it kernels are interpreted only.
find_package(LLVM 14 CONFIG QUIET)
if(LLVM_FOUND AND TARGET LLVM)
  set(RGPU_LLVM_FOUND ON)
  message(STATUS "PTX JIT: LLVM ${LLVM_PACKAGE_VERSION}")
else()
  set(RGPU_LLVM_FOUND OFF)
  message(WARNING "LLVM 14 (llvm-14-dev) not found: the sim backend's PTX JIT is not built")
endif()
