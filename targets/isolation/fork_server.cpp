#include "targets/isolation/fork_server.hpp"

#include "targets/isolation/remote_table.hpp"
#include "targets/isolation/wire.hpp"
#include "util/cat.hpp"
#include "util/error.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <utility>
#include <vector>

extern char** environ;

#ifndef KVWELD_ENGINE_HOST_PATH
#define KVWELD_ENGINE_HOST_PATH ""
#endif

namespace kvweld::targets::isolation {

std::string engine_host_path() {
    const char* given = std::getenv("KVWELD_ENGINE_HOST");
    return given && *given ? given : KVWELD_ENGINE_HOST_PATH;
}

namespace {

// A descriptor moved to at least 10, close-on-exec, so that the dup2 onto
// fd 3 in the server never collides with it.
int high_fd(int fd) {
    const int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, 10);
    ::close(fd);
    require(moved >= 0, "engine isolation: cannot move a descriptor: ", std::strerror(errno));
    return moved;
}

template <class T>
std::span<const std::byte> bytes_of(const T& v) {
    return {reinterpret_cast<const std::byte*>(&v), sizeof v};
}

}  // namespace

ForkServer& ForkServer::of(const std::string& plugin) {
    static std::mutex lock;
    static std::map<std::string, std::unique_ptr<ForkServer>> servers;
    const std::lock_guard<std::mutex> held(lock);
    auto& s = servers[plugin];
    if (!s) s.reset(new ForkServer(plugin));
    return *s;
}

ForkServer::ForkServer(const std::string& plugin) : plugin_(plugin) {
    const std::string host = engine_host_path();
    require(!host.empty() && ::access(host.c_str(), X_OK) == 0, "engine isolation: no kvweld-engine-host at '", host,
            "' (this build's, or $KVWELD_ENGINE_HOST): build it, or run the engine in process (--isolate no)");
    int sv[2];
    require(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == 0, "engine isolation: socketpair: ",
            std::strerror(errno));
    fd_ = sv[0];
    const int theirs = high_fd(sv[1]);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, theirs, 3);
    // ggml prints a backtrace by attaching gdb when it aborts: not here.
    // And OpenMP threads spin as little as libgomp lets them when it sees
    // more threads than cores: in a process of its own it cannot see the
    // other engines' threads and would spin in full. Measured, `kvweld swarm
    // --engine llamacpp --seeds 0..99 --jobs 2` on 2 cores: 334 s with
    // libgomp's default, 29.7 s with OMP_WAIT_POLICY=PASSIVE, 17.3 s with
    // GOMP_SPINCOUNT=1000 (libgomp's own throttled count), 7.0 s in process.
    // In a sanitizer build the engine's own signals stay signals (the
    // sanitizer would catch a SEGV and exit 1 instead).
    std::vector<char*> env;
    for (char** e = environ; *e; ++e)
        if (std::strncmp(*e, "ASAN_OPTIONS=", 13) != 0) env.push_back(*e);
    std::string no_backtrace = "GGML_NO_BACKTRACE=1", spin = "GOMP_SPINCOUNT=1000";
    const char* asan = std::getenv("ASAN_OPTIONS");
    std::string signals = cat("ASAN_OPTIONS=", asan && *asan ? cat(asan, ":") : "",
                              "handle_segv=0:handle_sigbus=0:handle_sigfpe=0:handle_sigill=0");
    std::string parent = std::to_string(::getpid());
    env.push_back(no_backtrace.data());
    env.push_back(signals.data());
    if (!std::getenv("GOMP_SPINCOUNT") && !std::getenv("OMP_WAIT_POLICY")) env.push_back(spin.data());
    env.push_back(nullptr);
    std::string host_arg = host, plugin_arg = plugin;
    char* argv[] = {host_arg.data(), plugin_arg.data(), parent.data(), nullptr};
    const int rc = ::posix_spawn(&pid_, host.c_str(), &actions, nullptr, argv, env.data());
    posix_spawn_file_actions_destroy(&actions);
    ::close(theirs);
    require(rc == 0, "engine isolation: cannot start ", host, ": ", std::strerror(rc));
    // Its hello: whether the plugin loaded there.
    std::array<std::byte, 1024> hello{};
    std::array<int, 2> none{};
    const long n = wire::receive_control(fd_, hello, none);
    std::int32_t loaded = -1;
    if (n >= long(sizeof loaded)) std::memcpy(&loaded, hello.data(), sizeof loaded);
    if (loaded != 0) {
        const std::string why = n > long(sizeof loaded)
                                    ? std::string(reinterpret_cast<const char*>(hello.data()) + sizeof loaded,
                                                  std::size_t(n) - sizeof loaded)
                                    : "it ended before its hello";
        ::close(std::exchange(fd_, -1));
        int status = 0;
        ::waitpid(pid_, &status, 0);
        throw Error(cat("engine isolation: the fork server for ", plugin, " did not start: ", why));
    }
}

ForkServer::~ForkServer() {
    if (fd_ >= 0) ::close(fd_);  // the server ends when its control socket closes
    int status = 0;
    if (pid_ > 0) ::waitpid(pid_, &status, 0);
}

pid_t ForkServer::spawn(int wire, int log) {
    const std::lock_guard<std::mutex> held(lock_);
    const std::array<int, 2> fds{wire, log};
    const char ask = 'S';
    std::int32_t child = -1;
    std::array<int, 2> none{};
    const bool sent = wire::send_control(fd_, bytes_of(ask), fds);
    const long n = sent ? wire::receive_control(fd_, std::as_writable_bytes(std::span(&child, 1)), none) : -1;
    require(n == long(sizeof child), "engine isolation: the fork server for ", plugin_, " (pid ", pid_,
            ") is gone: no engine can start");
    require(child > 0, "engine isolation: the fork server for ", plugin_, " cannot fork: ", std::strerror(-child));
    return child;
}

int ForkServer::wait(pid_t child) {
    const std::lock_guard<std::mutex> held(lock_);
    struct {
        char ask = 'W';
        std::int32_t pid;
    } request{'W', std::int32_t(child)};
    std::int32_t status = 0;
    std::array<int, 2> none{};
    const bool sent = wire::send_control(fd_, bytes_of(request), {});
    const long n = sent ? wire::receive_control(fd_, std::as_writable_bytes(std::span(&status, 1)), none) : -1;
    // Without its server a child cannot be asked after: it died with it (SIGKILL).
    return n == long(sizeof status) ? int(status) : SIGKILL;
}

}  // namespace kvweld::targets::isolation
