// The fork server of a plugin: kvweld-engine-host started once per plugin
// and kvweld process, the plugin loaded there, forking one child per
// engine (AFL's fork server: the load, a dynamic link of a whole engine,
// is paid once, a fork per engine). Each child gets the engine's wire and
// its log as descriptors passed over the server's control socket
// (SOCK_SEQPACKET), and the server reaps it when asked. It dies with the
// kvweld that started it, and its children with it.
//
// Control messages: the server's hello (an int32 result and its error
// text); 'S' with the wire and log descriptors, answered by the child's
// pid (an int32, negative: -errno); 'W' and a pid, answered by its wait
// status once it has ended (killed after 2 s if it has not).
#pragma once

#include <sys/types.h>

#include <mutex>
#include <string>

namespace kvweld::targets::isolation {

class ForkServer {
public:
    // The server for `plugin`, started on first use; an Error names what failed.
    static ForkServer& of(const std::string& plugin);
    ~ForkServer();
    ForkServer(const ForkServer&) = delete;
    ForkServer& operator=(const ForkServer&) = delete;

    // A child serving one engine on `wire` (its fd 3) with `log` as its
    // stdout and stderr; its pid. An Error names what failed.
    pid_t spawn(int wire, int log);
    // Its wait status (waitpid's), once it has ended.
    int wait(pid_t child);

private:
    explicit ForkServer(const std::string& plugin);
    std::mutex lock_;
    std::string plugin_;
    pid_t pid_ = -1;
    int fd_ = -1;
};

}  // namespace kvweld::targets::isolation
