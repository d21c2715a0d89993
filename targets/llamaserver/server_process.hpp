// A llama-server process of kvweld's own. It listens on 127.0.0.1 at an
// ephemeral port (--port 0: the kernel picks a free one, so a port in use
// never stops a run; the port is read from the server's log), its output
// goes to a log file that outlives it, and it is stopped by its own PID
// (SIGTERM, then SIGKILL after a grace), at the latest when this object
// goes. Starting waits for /health to answer 200; a server that exits
// first, or does not answer within the limit, is an Error quoting the
// log's last lines, and nothing is left running.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace kvweld::targets::llamaserver {

struct ServerSetup {
    std::string binary;             // llama-server
    std::string model;              // a GGUF file
    std::vector<std::string> args;  // its other flags (-np, -c, --kv-unified, ...)
    std::string log;                // where its output goes
    double start_timeout_s = 60;
};

class ServerProcess {
public:
    explicit ServerProcess(ServerSetup setup);
    ~ServerProcess();
    ServerProcess(const ServerProcess&) = delete;
    ServerProcess& operator=(const ServerProcess&) = delete;

    int port() const { return port_; }
    pid_t pid() const { return pid_; }
    // Whether it still runs; once it has ended, its wait status is kept.
    bool running();
    int wait_status() const { return status_; }
    // Stops it by its PID and reaps it (a no-op once it has ended).
    void stop(double grace_s = 5);
    // The last `lines` lines of its log.
    std::string log_tail(int lines) const;

private:
    void await_health();
    ServerSetup setup_;
    pid_t pid_ = -1;
    int port_ = 0;
    int status_ = 0;
};

// Runs a short-lived program of kvweld's own (`words`, the program first)
// to its end, its output to `log`: an Error quoting the log's last lines
// where it fails or outlives `timeout_s` (then it is killed). A signal that
// stops kvweld stops it too.
void run_to_end(const std::vector<std::string>& words, const std::string& log, double timeout_s);

}  // namespace kvweld::targets::llamaserver
