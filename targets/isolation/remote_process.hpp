// The engine's process (targets/isolation/remote_table.hpp): a child of its
// plugin's fork server, asked one call at a time with a deadline, killed
// by its PID when it hangs or breaks the wire, and reaped; its stdout and
// stderr kept in memory (a memfd) and read back when it dies.
#pragma once

#include "targets/isolation/wire.hpp"

#include <sys/types.h>

#include "targets/isolation/fork_server.hpp"

#include <optional>
#include <string>
#include <vector>

namespace kvweld::targets::isolation {

// A crash's title, the way syzkaller titles one: how the process ended
// ("SIGABRT", "exit 3"), then the last line it wrote, its "file:line: "
// prefix dropped (a line number changes between releases) and a
// sanitizer's "==pid==" with it, so that one bug has one title.
std::string crash_title(const std::string& how, const std::string& output);

class Process {
public:
    Process() = default;
    ~Process();
    Process(const Process&) = delete;
    Process& operator=(const Process&) = delete;

    // A child of the plugin's fork server, its wire on fd 3; an Error names what failed.
    void start(const std::string& plugin, int timeout_ms);
    // The answer to `call`; nullopt once the process is gone (lost() says how).
    std::optional<std::vector<std::byte>> exchange(const wire::Writer& call);
    // It broke the wire: killed, and lost() says `why`.
    void abandon(const std::string& why);
    // The last call (destroy): sent, its answer awaited, the process reaped.
    void finish(const wire::Writer& last);

    const std::string& lost() const { return lost_; }
    const std::string& crash_title() const { return title_; }

private:
    void end(const std::string& during, wire::Received how);
    std::string reap(bool kill);  // how it ended: "exited with status 3", "killed by signal 6 (SIGABRT)"
    std::string last_output() const;

    ForkServer* server_ = nullptr;
    pid_t pid_ = -1;
    int fd_ = -1, log_ = -1;
    int timeout_ms_ = 0;
    std::string plugin_, lost_, title_;
    std::string ended_;  // short: "SIGABRT", "exit 3"
};

}  // namespace kvweld::targets::isolation
