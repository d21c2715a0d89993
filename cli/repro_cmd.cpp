// `kvweld repro TRACE`: a shrunk trace as a standalone program against the
// engine's own API (sim/repro.hpp), and with --run, that program compiled
// against a cached llama.cpp release and run: the exit code is the
// program's (1 the finding shows, 0 it does not).
#include "cli/commands.hpp"

#include "sim/repro.hpp"
#include "util/file_bytes.hpp"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sys/wait.h>

namespace kvweld::cli {

namespace {

namespace fs = std::filesystem;

struct ReproArgs {
    std::string trace, output, truth, release;
    bool run = false, upstream_test = false;
};

// scripts/setup-llama's cache: the pinned release is llama.cpp/, any other V llama.cpp-V/.
fs::path llama_install(const std::string& release) {
    const char* cache = std::getenv("KVWELD_CACHE");
    const char* home = std::getenv("HOME");
    const fs::path root = cache && *cache ? fs::path(cache) : fs::path(home ? home : ".") / ".cache" / "kvweld";
    const fs::path install = root / (release.empty() ? "llama.cpp" : "llama.cpp-" + release) / "install";
    require(fs::exists(install / "include" / "llama.h"), "repro --run: no llama.cpp ",
            release.empty() ? "(the pinned release)" : release, " at ", install.string(),
            ": run scripts/setup-llama", release.empty() ? "" : " --version " + release);
    return install;
}

// A release other than the pinned one is static archives (scripts/setup-llama).
std::string compile_command(const fs::path& source, const fs::path& binary, const fs::path& install,
                            bool upstream_test) {
    const std::string lib = (install / "lib").string();
    const std::string libs = fs::exists(install / "lib" / "libllama.a")
                                 ? cat("-Wl,--start-group ", lib, "/libllama.a ", lib, "/libggml.a ", lib, "/libggml-cpu.a ",
                                       lib, "/libggml-base.a -Wl,--end-group -fopenmp -lpthread -ldl -lm")
                                 : cat("-L", lib, " -lllama -lggml -lggml-base -Wl,-rpath,", lib);
    return cat("c++ -std=c++", upstream_test ? "17" : "20", " -O1 -Wall '", source.string(), "' -I'", (install / "include").string(), "' ", libs, " -o '",
               binary.string(), "'");
}

int exit_status(int raw) { return raw != -1 && WIFEXITED(raw) ? WEXITSTATUS(raw) : 2; }

int run_repro(const ReproArgs& a) {
    const std::string command = cat("kvweld repro ", a.trace, a.truth.empty() ? "" : " --truth " + a.truth,
                                    a.upstream_test ? " --upstream-test" : "");
    const sim::Repro r = sim::write_repro(a.trace, a.truth, command, a.upstream_test);
    const fs::path out = a.output.empty() ? fs::path(a.trace).filename().replace_extension(".cpp") : fs::path(a.output);
    write_text(out.string(), r.source);
    std::size_t lines = 0;
    for (char c : r.source) lines += c == '\n';
    std::printf("repro: wrote %s (%zu lines; %d of them API calls, for %zu ops) for %s\n", out.string().c_str(), lines,
                r.call_lines, r.replay.ops.size(), r.title.c_str());
    std::printf("repro: ground truth %s; in kvweld the trace replays as %s\n", r.truth.c_str(),
                std::string(sim::to_string(r.replay.verdict)).c_str());
    if (!a.run) return 0;
    const std::string release =
        a.release.empty() ? targets::named_release(r.replay.config.engine.engine) : a.release;
    const fs::path binary = fs::path(out).replace_extension(".bin");  // never a trace's name
    const std::string compile = compile_command(out, binary, llama_install(release), a.upstream_test);
    std::printf("repro: %s\n", compile.c_str());
    std::fflush(stdout);
    require(exit_status(std::system(cat(compile, " 1>&2").c_str())) == 0, "repro --run: the program did not compile");
    std::printf("repro: running %s against llama.cpp %s\n", binary.string().c_str(),
                release.empty() ? "(the pinned release)" : release.c_str());
    std::fflush(stdout);
    const fs::path path = binary.has_parent_path() ? binary : fs::path(".") / binary;
    return exit_status(std::system(cat("'", path.string(), "'").c_str()));
}

}  // namespace

void add_repro_command(CLI::App& app, std::function<int()>& action) {
    auto a = std::make_shared<ReproArgs>();
    CLI::App* cmd = app.add_subcommand(
        "repro", "Write a trace as a standalone program against the engine's own API (llama.h and libllama for "
                 "llamacpp): the same calls on the engine's context and on a ground truth's, the numbers printed, "
                 "exit 1 when the finding shows and 0 when it does not. With --run it is compiled against a cached "
                 "llama.cpp release and run, and its exit code is this command's (2: it did not compile, or bad input)");
    cmd->add_option("TRACE", a->trace, "a (shrunk) trace of a plugin engine")->required()->check(CLI::ExistingFile);
    cmd->add_option("-o,--output", a->output, "where to write the program (default: the trace's name, .cpp, here)");
    cmd->add_option("--truth", a->truth,
                    "the ground truth: engine settings that differ (graph_reuse=0, kv_unified=0|1), skip=N+M (trace "
                    "lines it does not run: a round trip that must change nothing), count-reuse (lost reuse: the "
                    "engine must reuse its graph as often), new-chains (a new sampler chain where the engine changes "
                    "one in place); default the finding's (repro_truth in a findings file "
                    "beside the trace), else graph_reuse=0");
    cmd->add_flag("--run", a->run, "compile the program (c++, C++20) against a cached llama.cpp and run it");
    cmd->add_flag("--upstream-test", a->upstream_test,
                  "write it as a test for the engine's own tree (llama.cpp: tests/test-<id>.cpp, C++17, the newest "
                  "llama.h's calls alone, as scripts/finding-reports puts it in a finding's patch); --run compiles it "
                  "with -std=c++17");
    cmd->add_option("--release", a->release,
                    "with --run: the llama-cpp-python release in the cache (scripts/setup-llama --version V; default "
                    "the trace engine's: llamacpp@V is V, llamacpp the pinned one)");
    cmd->callback([a, &action] { action = [a] { return run_repro(*a); }; });
}

}  // namespace kvweld::cli
