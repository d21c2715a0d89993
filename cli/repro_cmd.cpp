// `kvweld repro TRACE`: a shrunk trace as a standalone program against the
// engine's own API (sim/repro.hpp), and with --run, that program compiled
// against a cached llama.cpp release and run: the exit code is the
// program's (1 the finding shows, 0 it does not).
#include "cli/commands.hpp"

#include "engine/gguf.hpp"
#include "sim/jsonl.hpp"
#include "sim/repro.hpp"
#include "sim/server/server_run.hpp"
#include "targets/llama_cache.hpp"
#include "util/file_bytes.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sys/wait.h>

namespace kvweld::cli {

namespace {

namespace fs = std::filesystem;

struct ReproArgs {
    std::string trace, output, truth, release, server;
    bool run = false, upstream_test = false;
};

fs::path llama_install(const std::string& release) {
    const fs::path install = targets::llama_install(release);
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

// A server trace: replayed on --server to find its failure, then written as
// a shell script; --run runs it there on the trace's model.
int run_server_repro(const ReproArgs& a, const std::string& text) {
    require(!a.server.empty(), "repro: ", a.trace, " is a server trace: give --server PATH (a llama-server) to replay it");
    const sim::server::ServerTrace t = sim::server::parse_server_trace(text, a.trace);
    sim::server::ServerRunConfig c = t.config;
    c.server = a.server;
    c.work_dir = (fs::temp_directory_path() / cat("kvweld-repro-", ::getpid())).string();
    const sim::server::ServerRunResult r = sim::server::run_server_ops(c, t.ops, t.observed);
    std::printf("repro: %s replays on %s as %s\n", a.trace.c_str(), a.server.c_str(), std::string(to_string(r.verdict)).c_str());
    const std::string script = sim::server::server_script(r, cat("kvweld repro --server <llama-server> ", fs::path(a.trace).filename().string()));
    const fs::path out = a.output.empty() ? fs::path(a.trace).filename().replace_extension(".sh") : fs::path(a.output);
    write_text(out.string(), script);
    fs::remove_all(c.work_dir);
    std::size_t lines = 0;
    for (char ch : script) lines += ch == '\n';
    std::printf("repro: wrote %s (%zu lines) for %s at op %zu\n", out.string().c_str(), lines, r.failure->oracle.c_str(), r.failure->op);
    if (!a.run) return 0;
    // The script's files (the trace's model, its LoRA adapters, its draft model), in its argument order.
    std::vector<fs::path> files;
    for (const sim::server::ServerScriptFile& f : sim::server::server_script_files(t.config)) {
        files.push_back(fs::temp_directory_path() / cat("kvweld-repro-", ::getpid(), "-", f.name));
        std::ofstream(files.back(), std::ios::binary).write(reinterpret_cast<const char*>(f.bytes.data()), std::streamsize(f.bytes.size()));
    }
    std::string args;
    for (const fs::path& f : files) args += cat(" '", f.string(), "'");
    std::printf("repro: running %s %s%s\n", out.string().c_str(), a.server.c_str(), args.c_str());
    std::fflush(stdout);
    const int rc = exit_status(std::system(cat("bash '", out.string(), "' '", a.server, "'", args).c_str()));
    for (const fs::path& f : files) fs::remove(f);
    return rc;
}

int run_repro(const ReproArgs& a) {
    const std::string text = sim::read_text_file(a.trace);
    if (sim::server::is_server_trace(text)) return run_server_repro(a, text);
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
    cmd->add_option("TRACE", a->trace, "a (shrunk) trace of a plugin engine, or a server trace (then a shell script is "
                                       "written: curl against llama-server, the failing answer against kvweld's reference)")
        ->required()
        ->check(CLI::ExistingFile);
    cmd->add_option("--server", a->server, "a server trace's llama-server, to replay it on (and, with --run, run the script on)");
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
