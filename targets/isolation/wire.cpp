#include "targets/isolation/wire.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>

namespace kvweld::targets::wire {

std::string_view name(Fn fn) {
    switch (fn) {
        case Fn::create: return "create";
        case Fn::destroy: return "destroy";
        case Fn::vocab: return "vocab";
        case Fn::open_seq: return "open_seq";
        case Fn::close_seq: return "close_seq";
        case Fn::decode: return "decode";
        case Fn::truncate: return "truncate";
        case Fn::clear_seq: return "clear_seq";
        case Fn::clear_all: return "clear_all";
        case Fn::copy_seq: return "copy_seq";
        case Fn::counters: return "counters";
        case Fn::reload: return "reload";
        case Fn::storage: return "storage";
        case Fn::read_kv: return "read_kv";
        case Fn::swap_layer: return "swap_layer";
        case Fn::pool_info: return "pool_info";
        case Fn::block_table: return "block_table";
        case Fn::block_refcount: return "block_refcount";
        case Fn::pool_op: return "pool_op";
        case Fn::plan_serial: return "plan_serial";
        case Fn::set_loras: return "set_loras";
        case Fn::set_cvec: return "set_cvec";
        case Fn::decode_outputs: return "decode_outputs";
        case Fn::set_warmup: return "set_warmup";
        case Fn::twin_tolerance: return "twin_tolerance";
        case Fn::shift: return "shift";
        case Fn::state_save: return "state_save";
        case Fn::state_load: return "state_load";
        case Fn::set_live: return "set_live";
        case Fn::read_embeddings: return "read_embeddings";
        case Fn::set_sampler: return "set_sampler";
        case Fn::sampled: return "sampled";
        case Fn::set_abort: return "set_abort";
        case Fn::seq_length: return "seq_length";
        case Fn::live_settings_of: return "live_settings_of";
        case Fn::keep_seq: return "keep_seq";
        case Fn::takes_live: return "takes_live";
    }
    return "(not a function of the wire)";
}

bool is_query(Fn fn) {
    switch (fn) {
        case Fn::vocab:
        case Fn::counters:
        case Fn::storage:
        case Fn::read_kv:
        case Fn::pool_info:
        case Fn::block_table:
        case Fn::block_refcount:
        case Fn::plan_serial:
        case Fn::twin_tolerance:
        case Fn::read_embeddings:
        case Fn::sampled:
        case Fn::seq_length:
        case Fn::live_settings_of:
        case Fn::takes_live: return true;
        case Fn::create:
        case Fn::destroy:
        case Fn::open_seq:
        case Fn::close_seq:
        case Fn::decode:
        case Fn::truncate:
        case Fn::clear_seq:
        case Fn::clear_all:
        case Fn::copy_seq:
        case Fn::reload:
        case Fn::swap_layer:
        case Fn::pool_op:
        case Fn::set_loras:
        case Fn::set_cvec:
        case Fn::decode_outputs:
        case Fn::set_warmup:
        case Fn::shift:
        case Fn::state_save:
        case Fn::state_load:
        case Fn::set_live:
        case Fn::set_sampler:
        case Fn::set_abort:
        case Fn::keep_seq: return false;
    }
    return false;
}

bool send_message(int fd, const std::vector<std::byte>& bytes) {
    // One syscall for the length and the bytes: a call's cost is its syscalls.
    const auto length = std::uint32_t(bytes.size());
    std::array<iovec, 2> iov{iovec{const_cast<std::uint32_t*>(&length), sizeof length},
                             iovec{const_cast<std::byte*>(bytes.data()), bytes.size()}};
    std::size_t left = sizeof length + bytes.size();
    for (std::size_t first = 0; left > 0;) {
        msghdr msg{};
        msg.msg_iov = iov.data() + first;
        msg.msg_iovlen = iov.size() - first;
        const ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        left -= std::size_t(n);
        for (auto sent = std::size_t(n); sent > 0 && first < iov.size();) {  // skip what went
            const std::size_t part = std::min(sent, iov[first].iov_len);
            iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + part;
            iov[first].iov_len -= part;
            sent -= part;
            if (iov[first].iov_len == 0) ++first;
        }
    }
    return true;
}

namespace {

using Clock = std::chrono::steady_clock;

// Reads exactly out.size() bytes by the deadline (unbounded: none): a
// read first, and a wait only when nothing is there yet.
Received read_exactly(int fd, std::span<std::byte> out, bool bounded, Clock::time_point deadline) {
    for (std::size_t at = 0; at < out.size();) {
        const ssize_t n = ::recv(fd, out.data() + at, out.size() - at, MSG_DONTWAIT);
        if (n > 0) {
            at += std::size_t(n);
            continue;
        }
        if (n == 0) return Received::closed;
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) return Received::closed;
        int wait = -1;
        if (bounded) {
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
            if (left <= 0) return Received::timed_out;
            wait = int(left);
        }
        pollfd p{fd, POLLIN, 0};
        const int ready = ::poll(&p, 1, wait);
        if (ready < 0 && errno != EINTR) return Received::closed;
        if (ready == 0) return Received::timed_out;
    }
    return Received::message;
}

}  // namespace

Received receive_message(int fd, std::vector<std::byte>& out, int timeout_ms) {
    const bool bounded = timeout_ms >= 0;
    const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(std::max(timeout_ms, 0));
    std::uint32_t length = 0;
    std::span<std::byte> header(reinterpret_cast<std::byte*>(&length), sizeof length);
    if (const Received r = read_exactly(fd, header, bounded, deadline); r != Received::message) return r;
    require(length <= kMaxMessage, "wire: a message of ", length, " bytes: the limit is ", kMaxMessage);
    out.resize(length);
    return read_exactly(fd, out, bounded, deadline);
}

bool send_control(int fd, std::span<const std::byte> bytes, std::span<const int> fds) {
    alignas(cmsghdr) char room[CMSG_SPACE(sizeof(int) * 2)]{};
    iovec iov{const_cast<std::byte*>(bytes.data()), bytes.size()};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (!fds.empty() && fds.size() <= 2) {
        msg.msg_control = room;
        msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
        cmsghdr* c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
        std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
    }
    for (;;) {
        const ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        return n == ssize_t(bytes.size());
    }
}

long receive_control(int fd, std::span<std::byte> bytes, std::span<int> fds) {
    alignas(cmsghdr) char room[CMSG_SPACE(sizeof(int) * 2)]{};
    iovec iov{bytes.data(), bytes.size()};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = room;
    msg.msg_controllen = sizeof room;
    for (int& f : fds) f = -1;
    ssize_t n;
    do n = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    if (n <= 0) return -1;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (std::size_t i = 0; i < count; ++i) {
            int got;
            std::memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof got);
            if (i < fds.size()) fds[i] = got;
            else ::close(got);
        }
    }
    return long(n);
}

}  // namespace kvweld::targets::wire
