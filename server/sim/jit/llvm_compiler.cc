// The JIT plugin (librgpu_ptx_jit.so): jit::Compiler on LLVM's ORC JIT.
//
// One LLJIT per process, made by the plugin's entry point and never
// destroyed (code may run until the process exits). Each compile builds one
// LLVM module holding a Function's units (unit_plan, unit_emitter),
// optimises it for this host's CPU (its vector width, FMA), and adds it under
// a resource tracker of its own, which the Code removes when it is destroyed
// (the Function's module unloaded).
#include <llvm/ExecutionEngine/JITEventListener.h>
#include <llvm/ExecutionEngine/Orc/CompileUtils.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/RTDyldObjectLinkingLayer.h>
#include <llvm/ExecutionEngine/Orc/ThreadSafeModule.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Object/SymbolSize.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "server/sim/jit/unit_emitter.h"
#include "server/sim/jit/unit_plan.h"
#include "server/sim/ptx/ptx_jit.h"

namespace rgpu::server::ptx::jit {
namespace {

// Units of fewer instructions cost more to enter than to interpret.
constexpr uint32_t kMinUnit = 2;

std::string message(llvm::Error e) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << e;
  return os.str();
}

// RGPU_JIT_PERF_MAP=1: each compiled unit's address, size and name appended
// to /tmp/perf-<pid>.map, where `perf report` finds names for JIT code (the
// unit's kernel and first instruction: kernel@pc#compile).
class PerfMap final : public llvm::JITEventListener {
 public:
  void notifyObjectLoaded(ObjectKey, const llvm::object::ObjectFile& obj,
                          const llvm::RuntimeDyld::LoadedObjectInfo& info) override {
    std::lock_guard lock(mu_);
    std::FILE* f = std::fopen(("/tmp/perf-" + std::to_string(::getpid()) + ".map").c_str(), "a");
    if (!f) return;
    for (const auto& [sym, size] : llvm::object::computeSymbolSizes(obj)) {
      auto type = sym.getType();
      auto name = sym.getName();
      auto section = sym.getSection();
      auto address = sym.getAddress();
      if (!type || *type != llvm::object::SymbolRef::ST_Function || !name || !section || !address) {
        if (!type) llvm::consumeError(type.takeError());
        if (!name) llvm::consumeError(name.takeError());
        if (!section) llvm::consumeError(section.takeError());
        if (!address) llvm::consumeError(address.takeError());
        continue;
      }
      const uint64_t load = info.getSectionLoadAddress(**section);
      if (!load) continue;
      std::fprintf(f, "%llx %llx %s\n", static_cast<unsigned long long>(load + *address - (*section)->getAddress()),
                   static_cast<unsigned long long>(size), name->str().c_str());
    }
    std::fclose(f);
  }

 private:
  std::mutex mu_;
};

class LlvmCode final : public Code {
 public:
  LlvmCode(llvm::orc::ResourceTrackerSP tracker, std::vector<Unit> units, size_t code_size, uint32_t slots)
      : tracker_(std::move(tracker)) {
    units_ = std::move(units);
    range_slots_ = slots;
    starts_.assign(code_size, -1);
    for (size_t i = 0; i < units_.size(); ++i) starts_[units_[i].start] = static_cast<int32_t>(i);
  }
  ~LlvmCode() override {
    if (tracker_) llvm::consumeError(tracker_->remove());
  }

 private:
  llvm::orc::ResourceTrackerSP tracker_;
};

class LlvmCompiler final : public Compiler {
 public:
  static std::unique_ptr<LlvmCompiler> make(std::string& error) {
    auto host = llvm::orc::JITTargetMachineBuilder::detectHost();
    if (!host) {
      error = message(host.takeError());
      return nullptr;
    }
    host->setCodeGenOptLevel(llvm::CodeGenOpt::Default);
    auto tm = host->createTargetMachine();
    if (!tm) {
      error = message(tm.takeError());
      return nullptr;
    }
    // Kernels of different streams compile at once: a target machine per
    // compile (LLJIT's default compiler shares one, which is not thread-safe).
    auto jit =
        llvm::orc::LLJITBuilder()
            .setJITTargetMachineBuilder(*host)
            .setCompileFunctionCreator([](llvm::orc::JITTargetMachineBuilder jtmb)
                                           -> llvm::Expected<std::unique_ptr<llvm::orc::IRCompileLayer::IRCompiler>> {
              return std::make_unique<llvm::orc::ConcurrentIRCompiler>(std::move(jtmb));
            })
            .create();
    if (!jit) {
      error = message(jit.takeError());
      return nullptr;
    }
    // exp2 and what the code generator may call (memcpy, memset) come from the process.
    auto process =
        llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess((*jit)->getDataLayout().getGlobalPrefix());
    if (!process) {
      error = message(process.takeError());
      return nullptr;
    }
    (*jit)->getMainJITDylib().addGenerator(std::move(*process));
    if (const char* map = std::getenv("RGPU_JIT_PERF_MAP"); map && *map == '1') {
      if (auto* rtdyld = llvm::dyn_cast<llvm::orc::RTDyldObjectLinkingLayer>(&(*jit)->getObjLinkingLayer())) {
        static PerfMap* perf_map = new PerfMap;  // for the life of the process, as the JIT
        rtdyld->registerJITEventListener(*perf_map);
      }
    }
    return std::unique_ptr<LlvmCompiler>(new LlvmCompiler(std::move(*jit), std::move(*tm)));
  }

  // rgpu::server::ptx::jit::Compiler
  std::unique_ptr<Code> compile(const Function& fn, std::string& error) override {
    const auto started = std::chrono::steady_clock::now();
    const std::vector<Span> spans = planUnits(fn, kMinUnit);
    const uint64_t serial = next_.fetch_add(1);
    auto context = std::make_unique<llvm::LLVMContext>();
    auto module = std::make_unique<llvm::Module>("rgpu_jit_" + std::to_string(serial), *context);
    {
      std::lock_guard lock(tm_mu_);
      module->setDataLayout(tm_->createDataLayout());
      module->setTargetTriple(tm_->getTargetTriple().str());
    }
    std::vector<std::string> names;
    uint32_t slots = 0;
    const Liveness live(fn);
    for (const Span& s : spans) {
      names.push_back(fn.name + "@" + std::to_string(s.start) + "#" + std::to_string(serial));
      emitUnit(*module, fn, live, s, names.back(), slots);
    }
    std::string broken;
    llvm::raw_string_ostream broken_os(broken);
    if (llvm::verifyModule(*module, &broken_os)) {
      error = "the JIT emitted invalid code for " + fn.name + ": " + broken_os.str();
      return nullptr;
    }
    optimise(*module);
    std::vector<Unit> units;
    auto tracker = jit_->getMainJITDylib().createResourceTracker();
    if (!spans.empty()) {
      if (auto e = jit_->addIRModule(tracker, llvm::orc::ThreadSafeModule(std::move(module), std::move(context)))) {
        error = message(std::move(e));
        return nullptr;
      }
      for (size_t i = 0; i < spans.size(); ++i) {
        auto sym = jit_->lookup(names[i]);
        if (!sym) {
          error = message(sym.takeError());
          llvm::consumeError(tracker->remove());
          return nullptr;
        }
        units.push_back({spans[i].start, spans[i].count, reinterpret_cast<UnitFn>(sym->getAddress())});
      }
    }
    auto code = std::make_unique<LlvmCode>(std::move(tracker), std::move(units), fn.code.size(), slots);
    code->compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
    return code;
  }

 private:
  LlvmCompiler(std::unique_ptr<llvm::orc::LLJIT> jit, std::unique_ptr<llvm::TargetMachine> tm)
      : jit_(std::move(jit)), tm_(std::move(tm)) {}

  void optimise(llvm::Module& module) {
    // The target's cost model (vector width, FMA) for the optimiser; one
    // TargetMachine shared by every compile, so one at a time.
    std::lock_guard lock(tm_mu_);
    llvm::LoopAnalysisManager lam;
    llvm::FunctionAnalysisManager fam;
    llvm::CGSCCAnalysisManager cgam;
    llvm::ModuleAnalysisManager mam;
    llvm::PassBuilder pb(tm_.get());
    pb.registerModuleAnalyses(mam);
    pb.registerCGSCCAnalyses(cgam);
    pb.registerFunctionAnalyses(fam);
    pb.registerLoopAnalyses(lam);
    pb.crossRegisterProxies(lam, fam, cgam, mam);
    llvm::ModulePassManager mpm = pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O2);
    mpm.run(module, mam);
  }

  std::unique_ptr<llvm::orc::LLJIT> jit_;
  std::mutex tm_mu_;
  std::unique_ptr<llvm::TargetMachine> tm_;
  std::atomic<uint64_t> next_{0};
};

}  // namespace
}  // namespace rgpu::server::ptx::jit

extern "C" __attribute__((visibility("default"))) rgpu::server::ptx::jit::Compiler* rgpuPtxJitCreateCompiler(
    int abi, std::string* error) {
  using namespace rgpu::server::ptx::jit;
  if (abi != kJitAbi) {
    if (error) *error = "the JIT plugin was built for ABI " + std::to_string(kJitAbi) + ", not " + std::to_string(abi);
    return nullptr;
  }
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
  std::string why;
  auto compiler = LlvmCompiler::make(why);
  if (!compiler && error) *error = why;
  return compiler.release();  // the caller keeps it for the life of the process
}
