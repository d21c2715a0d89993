// One HTTP/1.1 exchange with a server on 127.0.0.1: what kvweld needs to
// drive llama-server (JSON in, JSON out), and nothing more. Each request
// opens its own connection and asks the server to close it; the whole
// exchange has a deadline. A refused connection, a deadline passed or an
// answer that is not HTTP throws Error naming the port, the path and the
// limit; a status of 4xx or 5xx is an answer (the caller judges it).
#pragma once

#include <functional>
#include <string>

namespace kvweld::targets::llamaserver {

struct HttpAnswer {
    int status = 0;
    std::string body;
};

// method: "GET" or "POST" (a POST's body is sent as application/json).
// A chunked answer (a stream of server-sent events) is decoded. `stop`,
// where given, is asked after each read with the answer's bytes so far:
// true closes the connection there (a client that cancels a stream), and
// the answer holds what came, its last chunk maybe cut.
HttpAnswer http_request(int port, const std::string& method, const std::string& path, const std::string& body,
                        double timeout_s, const std::function<bool(const std::string&)>& stop = {});

}  // namespace kvweld::targets::llamaserver
