// kvweld-engine-host PLUGIN PARENT_PID: a plugin's fork server
// (targets/isolation/fork_server.hpp) on its control socket, fd 3. It loads
// the plugin once and forks a child per engine, which serves that engine
// over the wire (targets/isolation/wire.hpp) on its own fd 3 until destroy,
// or until kvweld closes its end; the child's stdout and stderr are kvweld's
// log of it, read back when it dies. The server dies with the kvweld that
// started it and each child with its server, so nothing is left running
// after a kvweld that was killed.
#include "targets/given_settings.hpp"
#include "targets/isolation/wire.hpp"
#include "targets/plugin_host.hpp"
#include "engine/kv_cache.hpp"

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <array>
#include <csignal>
#include <cstdio>
#include <cstdlib>

namespace {

using namespace kvweld;
using namespace kvweld::targets;
using wire::Fn;

constexpr int kFd = 3;
constexpr std::size_t kMaxItems = std::size_t(1) << 26;  // any one array a call sends

struct Host {
    const kvweld_engine_api& api;
    kvweld_engine* engine = nullptr;
    std::int32_t vocab = 0;
};

// The answer's head: the result and the error text the call wrote.
struct Answer {
    wire::Writer out;
    std::array<char, 512> err{};
    char* e() { return err.data(); }
    std::size_t n() const { return err.size(); }
    wire::Writer& head(int rc) {
        err.back() = '\0';
        out.put(std::int32_t(rc));
        out.put_string(err.data());
        return out;
    }
};

std::string text(wire::Reader& in) { return in.get_string().value_or(""); }

// The queries kvweld makes after every decode, answered ahead (wire.hpp).
void answer_ahead(const Host& h, std::size_t rows, wire::Writer& out) {
    std::vector<std::pair<Fn, std::int32_t>> ahead;
    if (h.api.counters && (h.api.capabilities & KVWELD_CAP_PLAN_COUNTERS)) ahead.emplace_back(Fn::counters, 0);
    if (h.api.sampled && (h.api.capabilities & KVWELD_CAP_SAMPLERS))
        for (std::size_t row = 0; row < rows; ++row) ahead.emplace_back(Fn::sampled, std::int32_t(row));
    out.put(std::uint32_t(ahead.size()));
    for (const auto& [fn, key] : ahead) {
        Answer a;
        if (fn == Fn::counters) {
            kvweld_engine_counters c{};
            const int rc = h.api.counters(h.engine, &c, a.e(), a.n());
            if (a.head(rc); rc == 0) a.out.put(c);
        } else {
            std::int32_t token = -1;
            const int rc = h.api.sampled(h.engine, key, &token, a.e(), a.n());
            if (a.head(rc); rc == 0) a.out.put(token);
        }
        out.put(fn);
        out.put(key);
        out.put_array(a.out.bytes().data(), a.out.bytes().size());
    }
}

// Serves one call; false once the engine is destroyed.
bool serve(Host& h, Fn fn, wire::Reader& in, Answer& a) {
    const kvweld_engine_api& api = h.api;
    kvweld_engine* e = h.engine;
    switch (fn) {
        case Fn::create: {
            const std::string model = text(in);
            kvweld_engine_options o{};
            o.model_path = model.c_str();
            o.n_ctx = in.get<std::int32_t>();
            o.n_seq_max = in.get<std::int32_t>();
            o.threads = in.get<std::int32_t>();
            GivenSettings settings;
            for (std::uint64_t n = in.get<std::uint64_t>(), i = 0; i < n; ++i) {
                const auto kind = in.get<std::int32_t>();
                const std::string name = text(in);
                settings.add(kind, name, in.get_string());
            }
            require(h.engine == nullptr, "create sent twice");
            const int rc = create_engine(api, o, settings, &h.engine, a.e(), a.n());
            if (rc == 0 && h.engine) h.vocab = api.vocab(h.engine);
            a.head(rc == 0 && !h.engine ? -1 : rc);
            if (rc == 0) a.out.put(h.vocab);
            return true;
        }
        case Fn::destroy:
            if (e) api.destroy(e);
            h.engine = nullptr;
            a.head(0);
            return false;
        case Fn::vocab: a.head(0).put(h.vocab); return true;
        case Fn::open_seq: a.head(api.open_seq(e, in.get<std::int32_t>(), a.e(), a.n())); return true;
        case Fn::close_seq: a.head(api.close_seq(e, in.get<std::int32_t>(), a.e(), a.n())); return true;
        case Fn::clear_seq: a.head(api.clear_seq(e, in.get<std::int32_t>(), a.e(), a.n())); return true;
        case Fn::keep_seq: a.head(api.keep_seq(e, in.get<std::int32_t>(), a.e(), a.n())); return true;
        case Fn::clear_all: a.head(api.clear_all(e, a.e(), a.n())); return true;
        case Fn::decode:
        case Fn::decode_outputs: {
            const auto seqs = in.get_vector<std::int32_t>(kMaxItems), tokens = in.get_vector<std::int32_t>(kMaxItems);
            const auto outputs = in.get_vector<std::uint8_t>(kMaxItems);
            require(seqs.size() == tokens.size(), "decode of ", seqs.size(), " sequences and ", tokens.size(), " tokens");
            require(fn == Fn::decode || outputs.size() == seqs.size(), "decode_outputs of ", seqs.size(), " pairs and ",
                    outputs.size(), " output flags");
            const std::size_t rows = wire::rows_wanted(fn == Fn::decode ? nullptr : outputs.data(), seqs.size());
            std::vector<float> logits(rows * std::size_t(h.vocab));
            const auto n = std::int32_t(seqs.size());
            const int rc = fn == Fn::decode
                               ? api.decode(e, seqs.data(), tokens.data(), n, logits.data(), a.e(), a.n())
                               : api.decode_outputs(e, seqs.data(), tokens.data(), outputs.data(), n, logits.data(),
                                                    a.e(), a.n());
            a.head(rc);
            if (rc == 0) {
                a.out.put_array(logits.data(), logits.size());
                answer_ahead(h, rows, a.out);
            }
            return true;
        }
        case Fn::truncate: {
            const auto seq = in.get<std::int32_t>(), n = in.get<std::int32_t>();
            a.head(api.truncate(e, seq, n, a.e(), a.n()));
            return true;
        }
        case Fn::copy_seq: {
            const auto src = in.get<std::int32_t>(), dst = in.get<std::int32_t>();
            a.head(api.copy_seq(e, src, dst, a.e(), a.n()));
            return true;
        }
        case Fn::counters: {
            kvweld_engine_counters c{};
            const int rc = api.counters(e, &c, a.e(), a.n());
            if (a.head(rc); rc == 0) a.out.put(c);
            return true;
        }
        case Fn::reload: {
            const std::string path = text(in);
            a.head(api.reload(e, path.c_str(), a.e(), a.n()));
            return true;
        }
        case Fn::storage: {
            const auto seq = in.get<std::int32_t>(), which = in.get<std::int32_t>(), layers = in.get<std::int32_t>();
            require(layers >= 0 && std::size_t(layers) <= kMaxItems, "storage of ", layers, " layers");
            std::vector<std::uint64_t> out(std::size_t(layers), 0);
            const int rc = api.storage(e, seq, which, out.data(), layers, a.e(), a.n());
            if (a.head(rc); rc == 0) a.out.put_array(out.data(), out.size());
            return true;
        }
        case Fn::read_kv: {
            const auto seq = in.get<std::int32_t>(), layer = in.get<std::int32_t>(), pos = in.get<std::int32_t>();
            const auto dim = in.get<std::int32_t>();
            require(dim >= 0 && std::size_t(dim) <= kMaxItems, "read_kv of ", dim, " floats");
            std::vector<float> k(static_cast<std::size_t>(dim)), v(static_cast<std::size_t>(dim));
            const int rc = api.read_kv(e, seq, layer, pos, k.data(), v.data(), dim, a.e(), a.n());
            if (a.head(rc); rc == 0) a.out.put_array(k.data(), k.size()), a.out.put_array(v.data(), v.size());
            return true;
        }
        case Fn::swap_layer: {
            const auto seq = in.get<std::int32_t>(), layer = in.get<std::int32_t>();
            a.head(api.swap_layer(e, seq, layer, a.e(), a.n()));
            return true;
        }
        case Fn::pool_info: {
            kvweld_pool_info p{};
            const int rc = api.pool_info(e, &p, a.e(), a.n());
            if (a.head(rc); rc == 0) a.out.put(p);
            return true;
        }
        case Fn::block_table: {
            const auto seq = in.get<std::int32_t>(), cap = in.get<std::int32_t>();
            require(cap >= 0 && std::size_t(cap) <= kMaxItems, "block_table of ", cap, " blocks");
            std::vector<std::int32_t> out(static_cast<std::size_t>(cap));
            std::int32_t count = -1;
            const int rc = api.block_table(e, seq, out.data(), cap, &count, a.e(), a.n());
            if (a.head(rc); rc == 0) {
                a.out.put(count);
                a.out.put_array(out.data(), std::size_t(std::clamp(count, 0, cap)));
            }
            return true;
        }
        case Fn::block_refcount: {
            std::int32_t out = -1;
            const int rc = api.block_refcount(e, in.get<std::int32_t>(), &out, a.e(), a.n());
            if (a.head(rc); rc == 0) a.out.put(out);
            return true;
        }
        case Fn::pool_op: a.head(api.pool_op(e, in.get<std::int32_t>(), a.e(), a.n())); return true;
        case Fn::plan_serial: {
            std::uint64_t out = 0;
            const int rc = api.plan_serial(e, in.get<std::int32_t>(), &out, a.e(), a.n());
            if (a.head(rc); rc == 0) a.out.put(out);
            return true;
        }
        case Fn::set_loras: {
            const auto n = in.get<std::int32_t>();
            require(n >= 0 && n <= 1024, "set_loras of ", n, " adapters");
            std::vector<std::string> paths;
            for (int i = 0; i < n; ++i) paths.push_back(text(in));
            const auto scales = in.get_vector<float>(std::size_t(n));
            require(scales.size() == std::size_t(n), "set_loras: ", scales.size(), " scales for ", n, " adapters");
            std::vector<const char*> ptrs;
            for (const std::string& p : paths) ptrs.push_back(p.c_str());
            a.head(api.set_loras(e, ptrs.data(), scales.data(), n, a.e(), a.n()));
            return true;
        }
        case Fn::set_cvec: {
            const bool present = in.get<std::uint8_t>() != 0;
            const auto data = in.get_vector<float>(kMaxItems);
            const auto n_embd = in.get<std::int32_t>(), start = in.get<std::int32_t>(), end = in.get<std::int32_t>();
            a.head(api.set_cvec(e, present ? data.data() : nullptr, data.size(), n_embd, start, end, a.e(), a.n()));
            return true;
        }
        case Fn::set_warmup: a.head(api.set_warmup(e, in.get<std::int32_t>(), a.e(), a.n())); return true;
        case Fn::twin_tolerance: {
            const char* why = nullptr;
            const double t = api.twin_tolerance(e, &why);
            a.head(0).put(t);
            a.out.put_string(why);
            return true;
        }
        case Fn::shift: {
            const auto seq = in.get<std::int32_t>(), p0 = in.get<std::int32_t>(), p1 = in.get<std::int32_t>();
            a.head(api.shift(e, seq, p0, p1, a.e(), a.n()));
            return true;
        }
        case Fn::state_save: {
            const auto seq = in.get<std::int32_t>();
            const auto cap = in.get<std::uint64_t>();
            require(cap <= kMaxCacheBytes, "state_save into ", cap, " bytes: the limit is ", kMaxCacheBytes);
            std::vector<std::uint8_t> out(cap);
            std::size_t n = 0;
            const int rc = api.state_save(e, seq, cap ? out.data() : nullptr, cap, &n, a.e(), a.n());
            if (a.head(rc); rc == 0) {
                a.out.put(std::uint64_t(n));
                a.out.put_array(out.data(), std::min<std::size_t>(n, cap));
            }
            return true;
        }
        case Fn::state_load: {
            const auto seq = in.get<std::int32_t>();
            const auto bytes = in.get_vector<std::uint8_t>(kMaxCacheBytes);
            a.head(api.state_load(e, seq, bytes.data(), bytes.size(), a.e(), a.n()));
            return true;
        }
        case Fn::set_live: {
            const std::string key = text(in), value = text(in);
            a.head(api.set_live(e, key.c_str(), value.c_str(), a.e(), a.n()));
            return true;
        }
        case Fn::read_embeddings: {
            const auto row = in.get<std::int32_t>(), n_embd = in.get<std::int32_t>();
            require(n_embd >= 0 && std::size_t(n_embd) <= kMaxItems, "read_embeddings of ", n_embd, " floats");
            std::vector<float> out(static_cast<std::size_t>(n_embd));
            const int rc = api.read_embeddings(e, row, out.data(), n_embd, a.e(), a.n());
            if (a.head(rc); rc == 0) a.out.put_array(out.data(), out.size());
            return true;
        }
        case Fn::set_sampler: {
            const auto seq = in.get<std::int32_t>();
            const bool present = in.get<std::uint8_t>() != 0;
            const auto s = in.get<kvweld_sampler>();
            const auto in_place = in.get<std::int32_t>();
            a.head(api.set_sampler(e, seq, present ? &s : nullptr, in_place, a.e(), a.n()));
            return true;
        }
        case Fn::sampled: {
            std::int32_t token = -1;
            const int rc = api.sampled(e, in.get<std::int32_t>(), &token, a.e(), a.n());
            if (a.head(rc); rc == 0) a.out.put(token);
            return true;
        }
        case Fn::set_abort: a.head(api.set_abort(e, in.get<std::int32_t>(), a.e(), a.n())); return true;
        case Fn::seq_length: {
            std::int32_t n = -1;
            const int rc = api.seq_length(e, in.get<std::int32_t>(), &n, a.e(), a.n());
            if (a.head(rc); rc == 0) a.out.put(n);
            return true;
        }
        case Fn::live_settings_of: a.head(0).put_string(api.live_settings_of(e)); return true;
        case Fn::takes_live: {
            const std::string key = text(in), value = text(in);
            a.head(0).put(api.takes_live(e, key.c_str(), value.c_str()));
            return true;
        }
    }
    throw Error(cat("no function ", std::uint32_t(fn), " on the wire"));
}

// One engine on the wire at kFd until destroy or kvweld's end closes.
int serve_engine(const kvweld_engine_api& api) {
    Host host{api};
    std::vector<std::byte> message;
    for (;;) {
        const wire::Received got = wire::receive_message(kFd, message, -1);
        if (got != wire::Received::message) return 0;  // kvweld closed its end
        wire::Reader in(message);
        const Fn fn = in.get<Fn>();
        require(host.engine != nullptr || fn == Fn::create, "call ", wire::name(fn), " before create");
        Answer answer;
        const bool more = serve(host, fn, in, answer);
        if (!wire::send_message(kFd, answer.out.bytes()) || !more) return 0;
    }
}

// A child for one engine: the wire on fd 3, the log as stdout and stderr.
[[noreturn]] void become_engine(const kvweld_engine_api& api, int control, int wire_fd, int log) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // dies with its server
    ::close(control);
    ::dup2(wire_fd, kFd);
    ::dup2(log, 1);
    ::dup2(log, 2);
    ::close(wire_fd);
    ::close(log);
    int rc = 0;
    try {
        rc = serve_engine(api);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "kvweld-engine-host: %s\n", e.what());
        rc = 2;
    }
    std::fflush(nullptr);
    // A coverage build of the engine (scripts/llama-coverage sets
    // KVWELD_COVERAGE) writes its counts at exit: then the child exits
    // whole, running the handlers _exit skips.
    if (std::getenv("KVWELD_COVERAGE")) std::exit(rc);
    ::_exit(rc);
}

// Reaps `child` once it has ended; one still running after 2 s is killed.
std::int32_t reap(pid_t child) {
    int status = 0;
    for (int waited = 0; ::waitpid(child, &status, WNOHANG) == 0; ++waited) {
        if (waited == 4000) ::kill(child, SIGKILL);  // 4000 waits of 0.5 ms
        ::usleep(waited < 4000 ? 500 : 5000);
    }
    return status;
}

template <class T>
std::span<const std::byte> bytes_of(const T& v) {
    return {reinterpret_cast<const std::byte*>(&v), sizeof v};
}

// The fork server (targets/isolation/fork_server.hpp) on its control socket.
int serve_forks(const std::string& plugin) {
    std::shared_ptr<const PluginLibrary> library;
    std::string why;
    try {
        library = PluginLibrary::open(plugin);
    } catch (const Error& e) {
        why = e.what();
    }
    std::vector<std::byte> hello(sizeof(std::int32_t));
    const std::int32_t loaded = library ? 0 : -1;
    std::memcpy(hello.data(), &loaded, sizeof loaded);
    for (const char c : why) hello.push_back(std::byte(c));
    if (!wire::send_control(kFd, hello, {}) || !library) return 2;
    for (;;) {
        std::array<std::byte, 16> ask{};
        std::array<int, 2> fds{};
        const long n = wire::receive_control(kFd, ask, fds);
        if (n <= 0) return 0;  // kvweld is gone: the children go with this process
        if (char(ask[0]) == 'S') {
            std::int32_t child = -EINVAL;
            if (fds[0] >= 0 && fds[1] >= 0) {
                const pid_t pid = ::fork();
                if (pid == 0) become_engine(library->api(), kFd, fds[0], fds[1]);
                child = pid > 0 ? std::int32_t(pid) : -errno;
            }
            for (const int f : fds)
                if (f >= 0) ::close(f);
            if (!wire::send_control(kFd, bytes_of(child), {})) return 0;
        } else if (char(ask[0]) == 'W' && n >= 8) {
            std::int32_t child = 0;
            std::memcpy(&child, ask.data() + 4, sizeof child);
            const std::int32_t status = child > 0 ? reap(pid_t(child)) : 0;
            if (!wire::send_control(kFd, bytes_of(status), {})) return 0;
        } else {
            return 2;  // not a control message: kvweld broke the protocol
        }
    }
}

}  // namespace

int main(int argc, char** argv) {
    // Killed with the kvweld that started it (its parent at the time, argv[2]).
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (argc != 3 || getppid() != std::atoi(argv[2])) {
        std::fprintf(stderr, "usage: kvweld-engine-host PLUGIN PARENT_PID (a fork server kvweld starts, its control "
                             "socket on fd 3)\n");
        return 2;
    }
    try {
        return serve_forks(argv[1]);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "kvweld-engine-host: %s\n", e.what());
        return 2;
    }
}
