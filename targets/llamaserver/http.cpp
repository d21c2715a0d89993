#include "targets/llamaserver/http.hpp"

#include "util/cat.hpp"
#include "util/error.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

namespace kvweld::targets::llamaserver {

namespace {

using Clock = std::chrono::steady_clock;

// A socket closed when it goes out of scope.
struct Socket {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    ~Socket() {
        if (fd >= 0) ::close(fd);
    }
};

// Milliseconds left before `deadline` (0: passed).
int left_ms(Clock::time_point deadline) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    return ms > 0 ? int(ms) : 0;
}

// Waits until fd is ready for `events`; false once the deadline has passed.
bool ready(int fd, short events, Clock::time_point deadline) {
    pollfd p{fd, events, 0};
    int rc;
    do rc = ::poll(&p, 1, left_ms(deadline));
    while (rc < 0 && errno == EINTR);
    return rc > 0;
}

// A chunked body decoded; a cut one (the client stopped reading) keeps what came.
std::string unchunk(const std::string& raw, const std::string& where) {
    std::string out;
    for (std::size_t at = 0; at < raw.size();) {
        const auto eol = raw.find("\r\n", at);
        if (eol == std::string::npos) break;
        std::size_t n = 0;
        require(std::sscanf(raw.c_str() + at, "%zx", &n) == 1, where, ": a chunk size that is not hex at byte ", at);
        if (n == 0) break;
        out.append(raw, eol + 2, std::min(n, raw.size() - (eol + 2)));
        at = eol + 2 + n + 2;
    }
    return out;
}

}  // namespace

HttpAnswer http_request(int port, const std::string& method, const std::string& path, const std::string& body,
                        double timeout_s, const std::function<bool(const std::string&)>& stop) {
    const std::string where = cat(method, " http://127.0.0.1:", port, path);
    const auto deadline = Clock::now() + std::chrono::milliseconds(long(timeout_s * 1000));
    Socket s;
    require(s.fd >= 0, where, ": no socket: ", std::strerror(errno));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(std::uint16_t(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(s.fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
        require(errno == EINPROGRESS, where, ": cannot connect: ", std::strerror(errno));
        require(ready(s.fd, POLLOUT, deadline), where, ": no connection within ", timeout_s, " s");
        int err = 0;
        socklen_t len = sizeof err;
        ::getsockopt(s.fd, SOL_SOCKET, SO_ERROR, &err, &len);
        require(err == 0, where, ": cannot connect: ", std::strerror(err));
    }
    std::string request = cat(method, " ", path, " HTTP/1.1\r\nHost: 127.0.0.1:", port, "\r\nConnection: close\r\n");
    if (method == "POST") request += cat("Content-Type: application/json\r\nContent-Length: ", body.size(), "\r\n");
    request += "\r\n" + (method == "POST" ? body : std::string());
    for (std::size_t sent = 0; sent < request.size();) {
        require(ready(s.fd, POLLOUT, deadline), where, ": the request was not taken within ", timeout_s, " s");
        const long n = ::send(s.fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
        require(n > 0 || errno == EAGAIN || errno == EINTR, where, ": send failed: ", std::strerror(errno));
        if (n > 0) sent += std::size_t(n);
    }
    // The answer, to the end of the stream (the server closes it).
    std::string answer;
    char buf[65536];
    while (true) {
        require(ready(s.fd, POLLIN, deadline), where, ": no whole answer within ", timeout_s, " s (", answer.size(),
                " bytes read)");
        const long n = ::recv(s.fd, buf, sizeof buf, 0);
        if (n == 0) break;
        require(n > 0 || errno == EAGAIN || errno == EINTR, where, ": receive failed: ", std::strerror(errno));
        if (n > 0) answer.append(buf, std::size_t(n));
        if (stop && stop(answer)) break;
    }
    const auto head_end = answer.find("\r\n\r\n");
    int status = 0;
    require(head_end != std::string::npos && std::sscanf(answer.c_str(), "HTTP/1.%*d %d", &status) == 1, where,
            ": not an HTTP answer (", answer.size(), " bytes: '", answer.substr(0, 40), "')");
    const std::string head = answer.substr(0, head_end);
    const bool chunked = head.find("Transfer-Encoding: chunked") != std::string::npos ||
                         head.find("transfer-encoding: chunked") != std::string::npos;
    return {status, chunked ? unchunk(answer.substr(head_end + 4), where) : answer.substr(head_end + 4)};
}

}  // namespace kvweld::targets::llamaserver
