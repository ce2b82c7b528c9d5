// Moving running sessions to new workers (docs/migration.md), end to end: a
// real server with [checkpoint], a training loop (migrate_client) moved
// while it runs by rgpu-smi --migrate, and what must hold whatever happens —
// every line the program prints is what an unmoved run prints.
#include <gtest/gtest.h>
#include <signal.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include <cstring>

#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include "tests/e2e/pool_fixture.h"

namespace rgpu::test {
namespace {

namespace fs = std::filesystem;

std::string migrateClient() { return std::string(RGPU_TEST_PROGRAMS_DIR) + "/migrate_client"; }

class Migration : public Pool {
 protected:
  void startWithCheckpoints(bool precopy = true) {
    const std::string key = dir_.file("checkpoint.key");
    writeFile(key, "6d5f0e8a7c4b3a2918f7e6d5c4b3a29180f1e2d3c4b5a69788796a5b4c3d2e1f\n");
    ::chmod(key.c_str(), 0600);
    start("admin = true\n", "",
          "[checkpoint]\ndir = \"" + dir_.file("checkpoints") + "\"\nkey_file = \"" + key + "\"\nprecopy = " +
              (precopy ? "true" : "false") + "\n"
          "[accounting]\npath = \"" + dir_.file("accounting.jsonl") + "\"\n");
  }
  // Runs migrate_client as alice in the background, its output in `out`.
  std::thread launch(const std::string& args, const std::string& out) {
    return std::thread([this, args, out] {
      run(migrateClient() + " " + args + " >" + out + " 2>&1",
          "RGPU_CONFIG=" + dir_.file("alice.toml") + " LD_LIBRARY_PATH=" + RGPU_CLIENT_LIBDIR);
    });
  }
  // The id of the session that last started (the server's log).
  std::string lastSession() {
    std::string log = server_->log(), id;
    std::smatch m;
    for (std::string rest = log; std::regex_search(rest, m, std::regex("session (\\d+): user 'alice' placed"));
         rest = m.suffix())
      id = m[1];
    return id;
  }
  RunResult smi(const std::string& user, const std::string& args) {
    return run(std::string(RGPU_SMI_BIN) + " " + args, "RGPU_CONFIG=" + dir_.file(user + ".toml"));
  }
  // The lines that say how training went (no timing, no log lines).
  static std::string steps(const std::string& out) {
    std::string kept;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);)
      if (line.rfind("step", 0) == 0 || line.rfind("big:", 0) == 0 || line.rfind("timing:", 0) == 0 ||
          line.rfind("array:", 0) == 0 || line.rfind("heap:", 0) == 0 ||
          line == "done")
        kept += line + "\n";
    return kept;
  }
  // migrate_client `args` moved at step 3 and again at step 8, run to its
  // end: what rgpu-smi said each time, and what the program printed.
  struct TwoMoves {
    std::string sid;
    RunResult first, second;
    std::string out;
  };
  TwoMoves movedTwice(const std::string& args, const std::string& file) {
    TwoMoves m;
    std::thread t = launch(args, file);
    waitFor([&] { return readFile(file).find("step 3 ") != std::string::npos; }, file);
    m.sid = lastSession();
    m.first = smi("alice", "--migrate " + m.sid);
    waitFor([&] { return readFile(file).find("step 8 ") != std::string::npos; }, file);
    m.second = smi("alice", "--migrate " + m.sid);
    t.join();
    m.out = readFile(file);
    return m;
  }
  size_t checkpointsLeft() {
    size_t n = 0;
    for (auto& e : fs::directory_iterator(dir_.file("checkpoints"))) (void)e, ++n;
    return n;
  }
};

TEST_F(Migration, ATrainingLoopMovedTwiceMidRunPrintsExactlyWhatAnUnmovedRunPrints) {
  startWithCheckpoints();
  RunResult alone = run(migrateClient() + " 12 0", "RGPU_CONFIG=" + dir_.file("alice.toml") +
                                                      " LD_LIBRARY_PATH=" + RGPU_CLIENT_LIBDIR);
  ASSERT_EQ(alone.code, 0) << alone.output;
  ASSERT_NE(alone.output.find("step 12 checksum"), std::string::npos) << alone.output;

  auto [sid, first, second, moved] = movedTwice("12 150", dir_.file("moved.out"));
  ASSERT_FALSE(sid.empty()) << server_->log();
  EXPECT_EQ(first.code, 0) << first.output << server_->log();
  EXPECT_NE(first.output.find("session " + sid + " moved to a new worker in "), std::string::npos) << first.output;
  EXPECT_EQ(second.code, 0) << second.output << server_->log();
  EXPECT_EQ(steps(moved), steps(alone.output)) << moved << "\nserver log:\n" << server_->log();
  EXPECT_NE(moved.find("steps counted on the device: 12"), std::string::npos) << moved;
  EXPECT_NE(moved.find("timing: ok"), std::string::npos) << moved;  // an event recorded before the moves
  // The checkpoints are gone once restored; the session ended once, having moved twice.
  EXPECT_EQ(checkpointsLeft(), 0u);
  std::string log = server_->log();
  EXPECT_NE(log.find("session " + sid + ": restored for user 'alice'"), std::string::npos) << log;
  waitFor([&] { return readFile(dir_.file("accounting.jsonl")).find("\"session\":" + sid + ",") != std::string::npos; },
          "the accounting line");
  std::string acct = readFile(dir_.file("accounting.jsonl"));
  std::smatch m;
  ASSERT_TRUE(std::regex_search(acct, m, std::regex("\\{[^\n]*\"session\":" + sid + ",[^\n]*\\}"))) << acct;
  EXPECT_NE(m.str().find("\"migrations\":2"), std::string::npos) << m.str();
  EXPECT_NE(m.str().find("\"reason\":\"client left\""), std::string::npos) << m.str();
}

// RGPU_MOVE_BIG_MIB sets the block the program holds besides its weights (64 MiB).
TEST_F(Migration, PreCopySendsOnlyWhatChangedSinceAndTheProgramSeesEveryByteRight) {
  const std::string big = std::getenv("RGPU_MOVE_BIG_MIB") ? std::getenv("RGPU_MOVE_BIG_MIB") : "64";
  std::string lines[2];
  for (bool precopy : {true, false}) {
    SCOPED_TRACE(precopy ? "pre-copy" : "no pre-copy");
    startWithCheckpoints(precopy);
    // Steps without a pause: the weights change between the pre-copy and the checkpoint.
    RunResult alone = run(migrateClient() + " 400 0 " + big, "RGPU_CONFIG=" + dir_.file("alice.toml") +
                                                              " LD_LIBRARY_PATH=" + RGPU_CLIENT_LIBDIR);
    ASSERT_EQ(alone.code, 0) << alone.output;
    const std::string out = dir_.file(precopy ? "pre.out" : "whole.out");
    std::thread t = launch("400 0 " + big, out);
    waitFor([&] { return readFile(out).find("step 3 ") != std::string::npos; }, out);
    RunResult r = smi("alice", "--migrate " + lastSession());
    EXPECT_EQ(r.code, 0) << r.output << server_->log();
    t.join();
    std::string got = readFile(out);
    // The weights changed after the pre-copy copied them: sent again, and right.
    EXPECT_EQ(steps(got), steps(alone.output)) << got << server_->log();
    EXPECT_NE(got.find("big: " + big + " MiB, 0 words wrong"), std::string::npos) << got;
    std::string log = server_->log();
    std::smatch m;
    if (precopy) {
      EXPECT_NE(r.output.find("pre-copy of "), std::string::npos) << r.output;
      // The block the program wrote once went before the pause, and only then.
      ASSERT_TRUE(std::regex_search(log, m, std::regex("(\\d+) bytes of device memory unchanged since the pre-copy")))
          << log;
      EXPECT_GE(std::stoull(m[1]), std::stoull(big) << 20) << log;
    } else {
      EXPECT_EQ(r.output.find("pre-copy"), std::string::npos) << r.output;
    }
    lines[precopy ? 0 : 1] = r.output;
    EXPECT_EQ(checkpointsLeft(), 0u);
    server_.reset();
  }
  std::printf("migration: figures: with pre-copy: %swithout: %s", lines[0].c_str(), lines[1].c_str());
}

// On the sim the array lies at its address; on the CUDA backend (the fake
// driver) it is the driver's, made again with its bytes, and the texture
// and surface objects the kernels receive come back under the same handles.
TEST_F(Migration, AnArrayWithItsTextureAndSurfaceObjectsMovesWithTheSession) {
  // The sim (two devices); the fake driver with one device; and with two
  // devices whose contexts each hand out object values from 1, so both
  // devices' objects have the same values and each device's restore fills
  // its own hole.
  struct Case {
    const char* name;
    bool cuda;
    int gpus;
  };
  for (Case c : {Case{"sim backend", false, 2}, Case{"cuda backend (fake driver)", true, 1},
                 Case{"cuda backend (fake driver, two devices, an object pool each)", true, 2}}) {
    SCOPED_TRACE(c.name);
    fake_cuda_ = c.cuda;
    if (c.cuda && c.gpus > 1) {
      ::setenv("RGPU_FAKE_CUDA_DEVICES", "2", 1);  // the server's workers inherit them
      ::setenv("RGPU_FAKE_CUDA_OBJECT_POOLS", "device", 1);
    }
    startWithCheckpoints();
    ::unsetenv("RGPU_FAKE_CUDA_DEVICES");
    ::unsetenv("RGPU_FAKE_CUDA_OBJECT_POOLS");
    const std::string out = dir_.file(std::string(c.cuda ? "array-cuda" : "array") + std::to_string(c.gpus) + ".out");
    auto [sid, first, second, got] = movedTwice("10 150 0 array", out);
    EXPECT_EQ(first.code, 0) << first.output << server_->log();
    EXPECT_EQ(second.code, 0) << second.output << server_->log();
    EXPECT_NE(got.find("array: 0 wrong through the texture, surface write landed (" + std::to_string(c.gpus) +
                       " devices)"),
              std::string::npos)
        << got;
    EXPECT_NE(got.find("step 10 checksum"), std::string::npos) << got;
    EXPECT_NE(got.find("done"), std::string::npos) << got;
    EXPECT_NE(got.find("resumed session"), std::string::npos) << got;
    EXPECT_EQ(checkpointsLeft(), 0u);
    // The handle the program freed below its objects was filled and freed again
    // in each new worker: on each device.
    if (c.cuda) {
      for (int d = 0; d < c.gpus; ++d)  // with a pool per context both devices give 2 and 3
        EXPECT_NE(got.find("objects of device " + std::to_string(d) + ": texture 2 (after 1, destroyed), surface 3"),
                  std::string::npos)
            << got;
      EXPECT_NE(server_->log().find("restore: " + std::to_string(c.gpus) +
                                    " texture and surface objects made to reach the program's handles"),
                std::string::npos)
          << server_->log();
    }
  }
}

TEST_F(Migration, AGraphLaunchedEveryStepMovesWithTheSession) {
  startWithCheckpoints();
  const std::string out = dir_.file("graph.out");
  std::thread t = launch("6 150 0 graph", out);
  waitFor([&] { return readFile(out).find("step 2 ") != std::string::npos; }, out);
  RunResult r = smi("alice", "--migrate " + lastSession());
  EXPECT_EQ(r.code, 0) << r.output << server_->log();
  t.join();
  std::string got = readFile(out);
  EXPECT_NE(got.find("graph: launched 6 times"), std::string::npos) << got;
  EXPECT_NE(got.find("resumed session"), std::string::npos) << got;
}

// On the sim and on the CUDA backend (rgpu's own heap there, cuda_heap.cc).
TEST_F(Migration, ASessionUsingTheDeviceMallocHeapMovesWithItsLiveBlocks) {
  for (bool cuda : {false, true}) {
    SCOPED_TRACE(cuda ? "cuda backend (fake driver)" : "sim backend");
    fake_cuda_ = cuda;
    startWithCheckpoints();
    RunResult alone = run(migrateClient() + " 8 0 0 heap", "RGPU_CONFIG=" + dir_.file("alice.toml") +
                                                              " LD_LIBRARY_PATH=" + RGPU_CLIENT_LIBDIR);
    ASSERT_EQ(alone.code, 0) << alone.output;
    // 8 steps of 32 blocks, each step freeing the odd half of the one before.
    const std::string kept = "heap: 0 words wrong in the 144 kept blocks, limit 16 MiB";
    ASSERT_NE(alone.output.find(kept), std::string::npos) << alone.output;
    const std::string out = dir_.file(cuda ? "heap-cuda.out" : "heap.out");
    std::thread t = launch("8 150 0 heap", out);
    waitFor([&] { return readFile(out).find("step 3 ") != std::string::npos; }, out);
    RunResult r = smi("alice", "--migrate " + lastSession());
    EXPECT_EQ(r.code, 0) << r.output << server_->log();
    t.join();
    std::string got = readFile(out);
    // Blocks kept before the move read back right after it, and blocks
    // allocated after it took none of their places (the free lists moved too).
    EXPECT_NE(got.find(kept), std::string::npos) << got;
    EXPECT_EQ(steps(got), steps(alone.output)) << got;
    EXPECT_NE(got.find("resumed session"), std::string::npos) << got;
    EXPECT_EQ(checkpointsLeft(), 0u);
    if (cuda) {
      EXPECT_NE(server_->log().find("'s malloc heap: 16777216 bytes at"), std::string::npos) << server_->log();
    }
  }
}

TEST_F(Migration, AGraphWithAConditionalNodeMovesWithItsHandle) {
  startWithCheckpoints();
  const std::string out = dir_.file("cond.out");
  std::thread t = launch("6 150 0 cond", out);
  waitFor([&] { return readFile(out).find("step 3 ") != std::string::npos; }, out);
  RunResult r = smi("alice", "--migrate " + lastSession());
  EXPECT_EQ(r.code, 0) << r.output << server_->log();
  t.join();
  std::string got = readFile(out);
  EXPECT_NE(got.find("cond: the branch ran on 3 of 6 launches"), std::string::npos) << got;
  EXPECT_NE(got.find("resumed session"), std::string::npos) << got;
}

TEST_F(Migration, ASessionThatCannotBeCheckpointedStaysWhereItIsAndFinishes) {
  startWithCheckpoints();
  const std::string out = dir_.file("hostfn.out");
  std::thread t = launch("4 0 0 hostfn", out);
  waitFor([&] { return readFile(out).find("hostfn 2 running") != std::string::npos; }, out);
  RunResult r = smi("alice", "--migrate " + lastSession());
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("not moved: cannot be checkpointed: a host function waits for the client"),
            std::string::npos)
      << r.output;
  t.join();
  EXPECT_NE(readFile(out).find("step 4 checksum"), std::string::npos) << readFile(out);
  EXPECT_NE(readFile(out).find("done"), std::string::npos);
  EXPECT_EQ(checkpointsLeft(), 0u);
}

// The CUDA backend, on the fake driver: the session's memory in address
// window 0 through the driver's virtual memory management calls, mapped at
// the same addresses in the new worker; module variables where the driver
// put them before; events' times carried across (the elapsed time from an
// event recorded before both moves spans them).
TEST_F(Migration, OnTheCudaBackendASessionMovesWithItsMemoryVariablesAndEventTimes) {
  fake_cuda_ = true;
  ::setenv("RGPU_FAKE_CUDA_LOG", dir_.file("driver.log").c_str(), 1);
  startWithCheckpoints();
  ::unsetenv("RGPU_FAKE_CUDA_LOG");
  RunResult alone = run(migrateClient() + " 12 0 8", "RGPU_CONFIG=" + dir_.file("alice.toml") +
                                                        " LD_LIBRARY_PATH=" + RGPU_CLIENT_LIBDIR);
  ASSERT_EQ(alone.code, 0) << alone.output << server_->log();
  auto [sid, first, second, moved] = movedTwice("12 150 8", dir_.file("cuda.out"));
  EXPECT_EQ(first.code, 0) << first.output << server_->log();
  EXPECT_NE(first.output.find("pre-copy of "), std::string::npos) << first.output;  // read while it ran
  EXPECT_EQ(second.code, 0) << second.output << server_->log();
  EXPECT_EQ(steps(moved), steps(alone.output)) << moved << "\nserver log:\n" << server_->log();
  EXPECT_NE(moved.find("steps counted on the device: 12"), std::string::npos) << moved;
  EXPECT_NE(moved.find("big: 8 MiB, 0 words wrong"), std::string::npos) << moved;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(moved, m, std::regex("elapsed: (\\d+) ms"))) << moved;
  EXPECT_GE(std::stoi(m[1]), 11 * 150) << moved;  // 12 steps, 150 ms apart, the first event before the moves
  EXPECT_EQ(checkpointsLeft(), 0u);
  const std::string log = server_->log();
  EXPECT_NE(log.find("session " + sid + ": restored for user 'alice'"), std::string::npos) << log;
  EXPECT_NE(log.find("checkpointed sessions: device memory in an address window"), std::string::npos) << log;
  std::printf("migration: cuda backend (fake driver): %s%s", first.output.c_str(), second.output.c_str());
  const std::string driver = readFile(dir_.file("driver.log"));
  EXPECT_NE(driver.find("at the address asked"), std::string::npos);
  EXPECT_EQ(driver.find(" elsewhere"), std::string::npos);
}

// The math libraries keep their state in the client (plans, handles,
// descriptors, generators) and every call carries it: a session using them
// moves, and each library goes on after the move -- on the CUDA backend with
// NVIDIA's plans and handles made again by the new worker (the fakes').
TEST_F(Migration, MathLibraryCallsGoOnAfterMovesAsIfUnmoved) {
  for (bool cuda : {false, true}) {
    SCOPED_TRACE(cuda ? "cuda backend (fake driver)" : "sim backend");
    fake_cuda_ = cuda;
    startWithCheckpoints();
    RunResult alone = run(migrateClient() + " 12 0 0 libs", "RGPU_CONFIG=" + dir_.file("alice.toml") +
                                                              " LD_LIBRARY_PATH=" + RGPU_CLIENT_LIBDIR);
    ASSERT_EQ(alone.code, 0) << alone.output << server_->log();
    ASSERT_NE(alone.output.find("step 12 libs "), std::string::npos) << alone.output;
    auto [sid, first, second, moved] = movedTwice("12 150 0 libs", dir_.file(cuda ? "libs-cuda.out" : "libs.out"));
    EXPECT_EQ(first.code, 0) << first.output << server_->log();
    EXPECT_EQ(second.code, 0) << second.output << server_->log();
    EXPECT_EQ(steps(moved), steps(alone.output)) << moved << "\nserver log:\n" << server_->log();
    EXPECT_EQ(moved.find("devInfo"), std::string::npos) << moved;
    EXPECT_NE(moved.find("done"), std::string::npos) << moved;
  }
}

// On a server whose sessions may move, device malloc on the CUDA backend is
// rgpu's own heap: the program that checks malloc, free, new/delete,
// __nv_aligned_device_malloc, NULL past the heap and the limit fixed after
// the first use passes there as on the sim (e2e_test.cc).
TEST_F(Migration, OnTheCudaBackendDeviceMallocBehavesAsTheDriversOnRgpusHeap) {
  fake_cuda_ = true;
  startWithCheckpoints();
  RunResult r = run(std::string(RGPU_TEST_PROGRAMS_DIR) + "/device_malloc",
                    "RGPU_CONFIG=" + dir_.file("alice.toml") + " LD_LIBRARY_PATH=" + RGPU_CLIENT_LIBDIR);
  EXPECT_EQ(r.code, 0) << r.output << server_->log();
  EXPECT_NE(r.output.find("device_malloc: all checks passed"), std::string::npos) << r.output;
  EXPECT_NE(server_->log().find("device 0's malloc heap: 16777216 bytes at"), std::string::npos) << server_->log();
}

// What the CUDA driver keeps to itself cannot move: the session stays and
// finishes. Here: its own malloc heap, for a module the driver would not take
// as PTX bound to rgpu's heap (as a driver older than the toolkit refuses the
// PTX and runs the fatbin's SASS).
TEST_F(Migration, OnTheCudaBackendASessionWhoseStateTheDriverKeepsStaysWhereItIs) {
  fake_cuda_ = true;
  ::setenv("RGPU_FAKE_CUDA_REFUSE_PTX_TEXT", "1", 1);
  startWithCheckpoints();
  ::unsetenv("RGPU_FAKE_CUDA_REFUSE_PTX_TEXT");
  for (auto [args, why] : {std::pair<const char*, const char*>{"8 150 0 heap", "a kernel that may call device malloc ran"}}) {
    SCOPED_TRACE(args);
    const std::string out = dir_.file(std::string(args).substr(std::string(args).rfind(' ') + 1) + ".out");
    std::thread t = launch(args, out);
    waitFor([&] { return readFile(out).find("step 3 ") != std::string::npos; }, out);
    RunResult r = smi("alice", "--migrate " + lastSession());
    EXPECT_NE(r.code, 0) << r.output;
    EXPECT_NE(r.output.find(std::string("not moved: cannot be checkpointed: ") + why), std::string::npos) << r.output;
    t.join();
    EXPECT_NE(readFile(out).find("step 8 checksum"), std::string::npos) << readFile(out);
    EXPECT_NE(readFile(out).find("heap: 0 words wrong in the 144 kept blocks"), std::string::npos) << readFile(out);
  }
  EXPECT_EQ(checkpointsLeft(), 0u);
  EXPECT_NE(server_->log().find("is on the driver's heap, and a session that runs one of them cannot move: the driver "
                                "refused its PTX bound to rgpu's heap"),
            std::string::npos)
      << server_->log();
}

TEST_F(Migration, OnlyAdminsMoveSessionsAndOnlyRunningOnes) {
  startWithCheckpoints();
  const std::string out = dir_.file("bob.out");
  std::thread t = launch("4 150", out);
  waitFor([&] { return readFile(out).find("step 1 ") != std::string::npos; }, out);
  RunResult bob = smi("bob", "--migrate " + lastSession());
  EXPECT_NE(bob.code, 0);
  EXPECT_NE(bob.output.find("only admins move sessions"), std::string::npos) << bob.output;
  RunResult none = smi("alice", "--migrate 999");
  EXPECT_NE(none.code, 0);
  EXPECT_NE(none.output.find("session 999 is not running on this server"), std::string::npos) << none.output;
  RunResult elsewhere = smi("alice", "--migrate " + lastSession() + " --to gpu07");
  EXPECT_NE(elsewhere.code, 0);
  EXPECT_NE(elsewhere.output.find("this server is not a member of a pool: its sessions move to new workers here only"),
            std::string::npos)
      << elsewhere.output;
  t.join();
  EXPECT_NE(readFile(out).find("done"), std::string::npos) << readFile(out);
  // A client that does not resume cannot be moved: refused at once.
  writeFile(dir_.file("noresume.toml"), "resume = false\n" + readFile(dir_.file("alice.toml")));
  const std::string out2 = dir_.file("noresume.out");
  std::thread t2([&] {
    run(migrateClient() + " 4 150 >" + out2 + " 2>&1",
        "RGPU_CONFIG=" + dir_.file("noresume.toml") + " LD_LIBRARY_PATH=" + RGPU_CLIENT_LIBDIR);
  });
  waitFor([&] { return readFile(out2).find("step 1 ") != std::string::npos; }, out2);
  RunResult fixed = smi("alice", "--migrate " + lastSession());
  EXPECT_NE(fixed.code, 0);
  EXPECT_NE(fixed.output.find("cannot move: its client does not resume"), std::string::npos) << fixed.output;
  t2.join();
  EXPECT_NE(readFile(out2).find("done"), std::string::npos) << readFile(out2);
}

TEST_F(Migration, WithoutACheckpointKeySessionsAreNotMoved) {
  start("admin = true\n");
  const std::string out = dir_.file("nokey.out");
  std::thread t = launch("3 150", out);
  waitFor([&] { return readFile(out).find("step 1 ") != std::string::npos; }, out);
  RunResult r = smi("alice", "--migrate " + lastSession());
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("no [checkpoint] dir and key_file"), std::string::npos) << r.output;
  t.join();
  EXPECT_NE(readFile(out).find("done"), std::string::npos);
}

TEST_F(Migration, AWorkerKilledWhileRestoringLeavesTheSessionRunningWhereItWas) {
  startWithCheckpoints();
  // 768 MiB of pseudo-random memory: the restore takes long enough to be killed in.
  const std::string out = dir_.file("kill.out");
  std::thread t = launch("40 150 768", out);
  // (Writing 768 MiB before its first step took over 10 s beside the rest of the suite on 2 cores.)
  waitFor([&] { return readFile(out).find("step 2 ") != std::string::npos; }, out, 60);
  const std::string sid = lastSession();
  std::thread move([&] {
    RunResult r = smi("alice", "--migrate " + sid);
    EXPECT_NE(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("not moved: restore: the worker is gone"), std::string::npos) << r.output;
  });
  std::string worker;  // (the match is copied out: it points into the log, gone at the lambda's end)
  waitFor(
      [&] {
        std::string log = server_->log();
        std::smatch m;
        if (!std::regex_search(log, m, std::regex("session " + sid + ": worker (\\d+) restores it"))) return false;
        worker = m[1].str();
        return true;
      },
      "the restoring worker");
  ::kill(std::stoi(worker), SIGKILL);
  move.join();
  // The next move makes a pre-copy of its own (the failed one's base went
  // with its worker) and succeeds.
  RunResult again = smi("alice", "--migrate " + sid);
  EXPECT_EQ(again.code, 0) << again.output << server_->log();
  EXPECT_NE(again.output.find("pre-copy of "), std::string::npos) << again.output;
  t.join();
  std::string got = readFile(out);
  EXPECT_NE(got.find("step 40 checksum"), std::string::npos) << got << server_->log();
  EXPECT_NE(got.find("steps counted on the device: 40"), std::string::npos) << got;
  EXPECT_NE(got.find("big: 768 MiB, 0 words wrong"), std::string::npos) << got;
  EXPECT_NE(got.find("done"), std::string::npos);
  EXPECT_EQ(checkpointsLeft(), 0u);
}

TEST_F(Migration, ACheckpointThatDoesNotFitOnItsDiskIsCalledOffAndTheSessionCarriesOn) {
  // The checkpoint directory is a 1 MiB file system of this test's own (a
  // mount namespace: root, as CI is), and the session holds 32 MiB.
  ASSERT_EQ(::unshare(CLONE_NEWNS), 0) << std::strerror(errno);
  ASSERT_EQ(::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr), 0) << std::strerror(errno);
  fs::create_directories(dir_.file("checkpoints"));
  ASSERT_EQ(::mount("tmpfs", dir_.file("checkpoints").c_str(), "tmpfs", 0, "size=1m,mode=0700"), 0)
      << std::strerror(errno);
  startWithCheckpoints();
  const std::string out = dir_.file("full.out");
  std::thread t = launch("6 150 32", out);
  waitFor([&] { return readFile(out).find("step 2 ") != std::string::npos; }, out);
  const std::string sid = lastSession();
  RunResult r = smi("alice", "--migrate " + sid);
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("not moved: writing the checkpoint: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("No space left on device"), std::string::npos) << r.output;
  t.join();
  std::string got = readFile(out);
  EXPECT_NE(got.find("step 6 checksum"), std::string::npos) << got << server_->log();
  EXPECT_NE(got.find("big: 32 MiB, 0 words wrong"), std::string::npos) << got;
  EXPECT_NE(got.find("done"), std::string::npos);
  EXPECT_EQ(checkpointsLeft(), 0u) << "the partial checkpoint is deleted";
  EXPECT_NE(server_->log().find("session " + sid + ": not moved, it carries on in this worker"), std::string::npos)
      << server_->log();
  server_.reset();
  ::umount2(dir_.file("checkpoints").c_str(), MNT_DETACH);
}

TEST_F(Migration, ARestoreTheNewWorkerRefusesIsCalledOffAndTheSessionCarriesOn) {
  // Sessions started after a reload get [limits] max_allocations = 2: the new
  // worker refuses the checkpoint of a session that holds more.
  startWithCheckpoints();
  const std::string out = dir_.file("refused.out");
  std::thread t = launch("6 150 8", out);
  waitFor([&] { return readFile(out).find("step 2 ") != std::string::npos; }, out);
  const std::string sid = lastSession();
  std::string toml = readFile(dir_.file("server.toml"));
  writeFile(dir_.file("server.toml"), toml + "[limits]\nmax_allocations = 2\n");
  ::kill(server_->pid(), SIGHUP);
  waitFor([&] { return server_->log().find("SIGHUP: configuration reloaded") != std::string::npos; }, "the reload");
  RunResult r = smi("alice", "--migrate " + sid);
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("not moved: restore: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("past the limit of 2"), std::string::npos) << r.output;
  t.join();
  std::string got = readFile(out);
  EXPECT_NE(got.find("step 6 checksum"), std::string::npos) << got << server_->log();
  EXPECT_NE(got.find("big: 8 MiB, 0 words wrong"), std::string::npos) << got;
  EXPECT_EQ(checkpointsLeft(), 0u);
}

}  // namespace
}  // namespace rgpu::test
