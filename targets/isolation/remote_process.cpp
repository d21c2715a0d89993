#include "targets/isolation/remote_process.hpp"

#include "targets/isolation/fork_server.hpp"
#include "targets/isolation/remote_table.hpp"
#include "util/cat.hpp"
#include "util/error.hpp"

#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <utility>


namespace kvweld::targets::isolation {

namespace {

constexpr std::size_t kTail = 2048;  // of the process's output, quoted when it dies

std::string signal_name(int sig) {
    const char* abbrev = sigabbrev_np(sig);
    return abbrev ? cat("SIG", abbrev) : cat("signal ", sig);
}

}  // namespace

std::string crash_title(const std::string& how, const std::string& output) {
    std::string line;
    for (std::size_t end = output.size(); end > 0 && line.empty();) {
        const std::size_t start = output.rfind('\n', end - 1);
        const std::size_t from = start == std::string::npos ? 0 : start + 1;
        line = output.substr(from, end - from);
        end = start == std::string::npos ? 0 : start;
    }
    if (line.size() > 2 && line.starts_with("==")) {
        const auto close = line.find("==", 2);
        if (close != std::string::npos && line.find_first_not_of("0123456789", 2) == close) line = line.substr(close + 2);
    }
    if (const auto colon = line.find(": "); colon != std::string::npos) {
        const auto number = line.rfind(':', colon - 1);
        if (number != std::string::npos && number + 1 < colon &&
            line.find_first_not_of("0123456789", number + 1) == colon)
            line = line.substr(colon + 2);
    }
    return line.empty() ? how : cat(how, ": ", line);
}

void Process::start(const std::string& plugin, int timeout_ms) {
    server_ = &ForkServer::of(plugin);
    plugin_ = plugin;
    timeout_ms_ = timeout_ms;
    int sv[2];
    require(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0, "engine isolation: socketpair: ",
            std::strerror(errno));
    fd_ = sv[0];
    log_ = ::memfd_create("kvweld-engine-log", MFD_CLOEXEC);
    if (log_ < 0) {
        ::close(sv[1]);
        throw Error(cat("engine isolation: memfd_create: ", std::strerror(errno)));
    }
    try {
        pid_ = server_->spawn(sv[1], log_);
    } catch (const Error&) {
        ::close(sv[1]);
        throw;
    }
    ::close(sv[1]);
}

std::optional<std::vector<std::byte>> Process::exchange(const wire::Writer& call) {
    if (!lost_.empty()) return std::nullopt;
    std::vector<std::byte> reply;
    wire::Received got = wire::Received::closed;
    if (wire::send_message(fd_, call.bytes())) {
        try {
            got = wire::receive_message(fd_, reply, timeout_ms_);
        } catch (const Error& e) {
            abandon(cat("answered ", wire::name(call.fn()), " with a broken message (", e.what(), ")"));
            return std::nullopt;
        }
    }
    if (got == wire::Received::message) return reply;
    end(std::string(wire::name(call.fn())), got);
    return std::nullopt;
}

void Process::end(const std::string& during, wire::Received how) {
    const bool hung = how == wire::Received::timed_out;
    const std::string ended = reap(hung);
    const std::string output = last_output();
    title_ = hung ? cat("hang in ", during) : isolation::crash_title(ended_, output);
    lost_ = cat("its process (pid ", pid_, ", ", plugin_, ") ",
                hung ? cat("answered no ", during, " in ", timeout_ms_, " ms and was killed")
                     : cat(ended, " during ", during),
                output.empty() ? "; it wrote nothing" : cat("; its last output: ", output));
}

void Process::abandon(const std::string& why) {
    reap(true);
    title_ = "broken wire";
    lost_ = cat("its process (pid ", pid_, ", ", plugin_, ") ", why, ", and was killed");
}

std::string Process::reap(bool kill) {
    if (pid_ <= 0) return "was never started";
    if (fd_ >= 0) ::close(std::exchange(fd_, -1));
    if (kill) ::kill(pid_, SIGKILL);
    // It ends when kvweld's end closes; its server kills one that does not.
    const int status = server_->wait(pid_);
    ended_ = WIFSIGNALED(status) ? signal_name(WTERMSIG(status)) : cat("exit ", WEXITSTATUS(status));
    if (WIFSIGNALED(status))
        return cat("was killed by signal ", WTERMSIG(status), " (", signal_name(WTERMSIG(status)), ")");
    return cat("exited with status ", WEXITSTATUS(status));
}

std::string Process::last_output() const {
    const off_t size = ::lseek(log_, 0, SEEK_END);
    if (size <= 0) return "";
    const auto n = std::size_t(std::min<off_t>(size, off_t(kTail)));
    std::string out(n, '\0');
    const ssize_t got = ::pread(log_, out.data(), n, size - off_t(n));
    out.resize(got > 0 ? std::size_t(got) : 0);
    while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
    return out;
}

void Process::finish(const wire::Writer& last) {
    if (lost_.empty() && pid_ > 0) {
        exchange(last);
        if (lost_.empty()) reap(false);
    }
    pid_ = -1;
}

Process::~Process() {
    if (pid_ > 0 && lost_.empty()) reap(false);
    if (fd_ >= 0) ::close(fd_);
    if (log_ >= 0) ::close(log_);
}

}  // namespace kvweld::targets::isolation
