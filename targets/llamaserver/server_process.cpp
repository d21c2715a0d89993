#include "targets/llamaserver/server_process.hpp"

#include "targets/llamaserver/http.hpp"
#include "util/cat.hpp"
#include "util/error.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <mutex>
#include <cstring>
#include <fstream>
#include <thread>

extern char** environ;

namespace kvweld::targets::llamaserver {

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kPoll = std::chrono::milliseconds(20);

// The port of llama-server's "listening on http://127.0.0.1:PORT" line (0: not yet).
int port_in_log(const std::string& log) {
    std::ifstream in(log);
    const std::string marker = "listening on http://127.0.0.1:";
    for (std::string line; std::getline(in, line);)
        if (const auto at = line.find(marker); at != std::string::npos) return std::atoi(line.c_str() + at + marker.size());
    return 0;
}

// The servers this process started and has not reaped: if kvweld itself
// is stopped by SIGINT, SIGTERM or SIGHUP, its handler kills each (kill is
// async-signal-safe; the slots are lock-free atomics) and then lets the
// signal end kvweld as it would have, so no server outlives a run.
std::array<std::atomic<pid_t>, 256> g_live{};

extern "C" void kill_live_servers(int sig) {
    for (std::atomic<pid_t>& p : g_live)
        if (const pid_t pid = p.load(); pid > 0) ::kill(pid, SIGKILL);
    ::signal(sig, SIG_DFL);
    ::raise(sig);
}

void remember(pid_t pid) {
    static std::once_flag once;
    std::call_once(once, [] {
        for (const int s : {SIGINT, SIGTERM, SIGHUP}) {
            struct sigaction a = {};
            a.sa_handler = kill_live_servers;
            sigemptyset(&a.sa_mask);
            ::sigaction(s, &a, nullptr);
        }
    });
    for (std::atomic<pid_t>& p : g_live) {
        pid_t empty = 0;
        if (p.compare_exchange_strong(empty, pid)) return;
    }
}

void forget(pid_t pid) {
    for (std::atomic<pid_t>& p : g_live) {
        pid_t was = pid;
        if (p.compare_exchange_strong(was, 0)) return;
    }
}

std::string describe(int status) {
    if (WIFSIGNALED(status)) return cat("killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)), ")");
    return cat("exit ", WEXITSTATUS(status));
}

// Starts `words` (the program first) with its output to `log`; throws
// Error naming `what` where it cannot.
pid_t spawn(std::vector<std::string> words, const std::string& log_path, const char* what) {
    const int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    require(log >= 0, what, ": cannot write its log ", log_path, ": ", std::strerror(errno));
    std::vector<char*> argv;
    for (std::string& w : words) argv.push_back(w.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, log, 1);
    posix_spawn_file_actions_adddup2(&actions, log, 2);
    pid_t pid = -1;
    const int rc = ::posix_spawn(&pid, words[0].c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(log);
    require(rc == 0, what, ": cannot start ", words[0], ": ", std::strerror(rc));
    return pid;
}

std::string tail(const std::string& log, int lines) {
    std::ifstream in(log);
    std::vector<std::string> all;
    for (std::string line; std::getline(in, line);) all.push_back(line);
    std::string out;
    for (std::size_t i = all.size() > std::size_t(lines) ? all.size() - std::size_t(lines) : 0; i < all.size(); ++i)
        out += all[i] + "\n";
    return out;
}

}  // namespace

void run_to_end(const std::vector<std::string>& words, const std::string& log, double timeout_s) {
    const pid_t pid = spawn(words, log, words[0].c_str());
    remember(pid);
    const auto deadline = Clock::now() + std::chrono::milliseconds(long(timeout_s * 1000));
    int status = 0;
    pid_t got = 0;
    while ((got = ::waitpid(pid, &status, WNOHANG)) == 0 && Clock::now() < deadline) std::this_thread::sleep_for(kPoll);
    if (got == 0) ::kill(pid, SIGKILL), ::waitpid(pid, &status, 0);
    forget(pid);
    require(got != 0, words[0], " did not end within ", timeout_s, " s (killed); the last lines of its log (", log, "):\n",
            tail(log, 8));
    require(WIFEXITED(status) && WEXITSTATUS(status) == 0, words[0], " failed (", describe(status),
            "); the last lines of its log (", log, "):\n", tail(log, 8));
}

ServerProcess::ServerProcess(ServerSetup setup) : setup_(std::move(setup)) {
    std::vector<std::string> words = {setup_.binary, "-m", setup_.model, "--host", "127.0.0.1", "--port", "0"};
    words.insert(words.end(), setup_.args.begin(), setup_.args.end());
    pid_ = spawn(words, setup_.log, "llama-server");
    remember(pid_);
    try {
        await_health();
    } catch (const Error& e) {
        // Nothing is left running, and the log says why.
        stop(1);
        throw Error(cat(e.what(), "; the last lines of its log (", setup_.log, "):\n", log_tail(8)));
    }
}

void ServerProcess::await_health() {
    const auto deadline = Clock::now() + std::chrono::milliseconds(long(setup_.start_timeout_s * 1000));
    while (true) {
        // running() first: it keeps the wait status the message names.
        const bool alive = running();
        require(alive, "llama-server (", setup_.binary, ") ended while starting (", describe(status_), ")");
        if (port_ == 0) port_ = port_in_log(setup_.log);
        // 503 while it loads the model; 200 once it serves.
        if (port_ != 0 && http_request(port_, "GET", "/health", "", 5).status == 200) return;
        require(Clock::now() < deadline, "llama-server (", setup_.binary, ") gave no answer to /health within ",
                setup_.start_timeout_s, " s", port_ == 0 ? " (no port in its log)" : "");
        std::this_thread::sleep_for(kPoll);
    }
}

ServerProcess::~ServerProcess() { stop(); }

bool ServerProcess::running() {
    if (pid_ < 0) return false;
    int status = 0;
    const pid_t got = ::waitpid(pid_, &status, WNOHANG);
    if (got == 0) return true;
    if (got == pid_) status_ = status;
    forget(pid_);
    pid_ = -1;
    return false;
}

void ServerProcess::stop(double grace_s) {
    if (!running()) return;
    ::kill(pid_, SIGTERM);
    const auto deadline = Clock::now() + std::chrono::milliseconds(long(grace_s * 1000));
    while (running() && Clock::now() < deadline) std::this_thread::sleep_for(kPoll);
    if (!running()) return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    status_ = status;
    forget(pid_);
    pid_ = -1;
}

std::string ServerProcess::log_tail(int lines) const { return tail(setup_.log, lines); }

}  // namespace kvweld::targets::llamaserver
