// A stand-in for llama-server in kvweld's tests: it prints llama-server's
// "listening on" line with the port the kernel gave it, and answers as its
// MODE says (its last argument, or $KVWELD_STAND_IN_MODE where set: a run
// that passes it llama-server's flags), so each test meets one way a
// server behaves or fails.
//   serve: /health 200, POST /completion 200 with {"tokens": [7]}
//   exit: says why and exits 3 before listening
//   silent: never listens (no port in its log)
//   hang: /health 200, then never answers a /completion
//   error: /health 200, /completion 500
//   ignore_term: as serve, and SIGTERM does nothing
//   answer=PATH: as serve, each POST /completion answered with PATH's
//     content (a scripted answer, right or wrong, for an oracle's test)
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

namespace {

std::string read_request(int fd) {
    std::string in;
    char buf[4096];
    while (in.find("\r\n\r\n") == std::string::npos) {
        const long n = ::recv(fd, buf, sizeof buf, 0);
        if (n <= 0) return in;
        in.append(buf, std::size_t(n));
    }
    const auto at = in.find("Content-Length: ");
    const std::size_t want = at == std::string::npos ? 0 : std::stoul(in.substr(at + 16));
    while (in.size() < in.find("\r\n\r\n") + 4 + want) {
        const long n = ::recv(fd, buf, sizeof buf, 0);
        if (n <= 0) break;
        in.append(buf, std::size_t(n));
    }
    return in;
}

void answer(int fd, int status, const std::string& body) {
    const std::string out = "HTTP/1.1 " + std::to_string(status) + " X\r\nContent-Type: application/json\r\nContent-Length: " +
                            std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
    (void)!::send(fd, out.data(), out.size(), MSG_NOSIGNAL);
}

}  // namespace

int main(int argc, char** argv) {
    const char* env = std::getenv("KVWELD_STAND_IN_MODE");
    const std::string mode = env ? env : argc > 1 ? argv[argc - 1] : "serve";
    if (mode == "exit") return std::puts("error: failed to load model 'none.gguf'"), 3;
    if (mode == "silent") return ::sleep(600), 0;
    if (mode == "ignore_term") ::signal(SIGTERM, SIG_IGN);
    const int s = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (::bind(s, reinterpret_cast<sockaddr*>(&addr), len) != 0 || ::listen(s, 8) != 0) return 4;
    ::getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len);
    std::printf("main: server is listening on http://127.0.0.1:%d - starting the main loop\n", ntohs(addr.sin_port));
    std::fflush(stdout);
    while (true) {
        const int c = ::accept(s, nullptr, nullptr);
        if (c < 0) continue;
        const std::string request = read_request(c);
        if (request.rfind("GET /health", 0) == 0)
            answer(c, 200, "{\"status\": \"ok\"}");
        else if (mode == "hang")
            continue;  // the connection stays open, unanswered
        else if (mode == "error")
            answer(c, 500, "{\"error\": {\"code\": 500, \"message\": \"stand-in failure\"}}");
        else if (mode.rfind("answer=", 0) == 0) {
            std::ostringstream body;
            body << std::ifstream(mode.substr(7)).rdbuf();
            answer(c, 200, body.str());
        } else
            answer(c, 200, "{\"tokens\": [7]}");
        ::close(c);
    }
}
