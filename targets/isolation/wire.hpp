// The wire between kvweld and an engine in a process of its own
// (targets/isolation/remote_table.hpp): each call of the engine ABI
// (include/kvweld/engine_abi.h) that takes an engine, as one framed
// message, and its answer as another. The process may be kvweld's own
// host (kvweld-engine-host, a plugin loaded there) or any program that
// speaks the same messages, in any language.
//
// A message is a 4-byte little-endian length and its bytes. A call: its Fn
// (4 bytes), then its arguments in the ABI's order, each a fixed-size value
// as the host's memory holds it, an array as an 8-byte count and its
// elements, a string as a 1-byte present flag, an 8-byte length and its
// bytes. An answer: the function's int result, its error text (a string),
// and only when the result is 0 its outputs in the ABI's order. create's
// options.given goes as an 8-byte count, then per entry its kind (4 bytes),
// name and value (strings); create answers the vocab after its outputs; a function without an error channel
// (vocab, twin_tolerance, live_settings_of, takes_live) answers result 0, an empty
// error and its value.
//
// A decode's answer ends with answers sent ahead: a 4-byte count, then for
// each its Fn, a 4-byte key (the row of sampled, 0 for counters) and the
// answer as an array of bytes. They are the queries kvweld makes after
// every decode (the counters, each output row's sampled token), made by
// the host right after the decode, so that a decode is one round trip
// instead of one per row. Each answers the first such query after the
// decode; any call that is not a query drops those not yet taken. A crash
// while making them is a crash of the decode.
#pragma once

#include "util/error.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace kvweld::targets::wire {

// One per engine function of the ABI's table; the host process serves
// each in an exhaustive switch, so a new one fails to build there until it
// is served.
enum class Fn : std::uint32_t {
    create, destroy, vocab, open_seq, close_seq, decode, truncate, clear_seq, clear_all, copy_seq, counters,
    reload, storage, read_kv, swap_layer, pool_info, block_table, block_refcount, pool_op, plan_serial,
    set_loras, set_cvec, decode_outputs, set_warmup, twin_tolerance, shift, state_save, state_load, set_live,
    read_embeddings, set_sampler, sampled, set_abort, seq_length, live_settings_of, keep_seq,
    takes_live,
};
std::string_view name(Fn fn);
// A query changes nothing in the engine (its table takes a const engine):
// an answer sent ahead of it stays good until a call that is not one.
bool is_query(Fn fn);

// The largest message either side accepts (a decode of 4096 rows of a
// 64k vocab is 1 GiB): a length past it is a broken peer, not an allocation.
inline constexpr std::uint32_t kMaxMessage = 1u << 30;

class Writer {
public:
    explicit Writer(Fn fn) : fn_(fn) { put(fn); }
    Writer() = default;  // an answer
    Fn fn() const { return fn_; }
    template <class T>
    void put(const T& v) {
        static_assert(std::is_trivially_copyable_v<T>);
        append(&v, sizeof v);
    }
    template <class T>
    void put_array(const T* data, std::size_t n) {
        static_assert(std::is_trivially_copyable_v<T>);
        put(std::uint64_t(n));
        if (n) append(data, n * sizeof(T));
    }
    void put_string(const char* s) {
        put(std::uint8_t(s != nullptr));
        put_array(s ? s : "", s ? std::strlen(s) : 0);
    }
    const std::vector<std::byte>& bytes() const { return bytes_; }

private:
    void append(const void* data, std::size_t size) {
        const std::size_t at = bytes_.size();
        bytes_.resize(at + size);
        std::memcpy(bytes_.data() + at, data, size);
    }
    Fn fn_ = Fn::create;
    std::vector<std::byte> bytes_;
};

// Reads what a Writer wrote; a message shorter than its reads, or an array
// longer than what the reader has room for, is an Error naming it.
class Reader {
public:
    explicit Reader(std::span<const std::byte> bytes) : bytes_(bytes) {}
    template <class T>
    T get() {
        static_assert(std::is_trivially_copyable_v<T>);
        T v;
        std::memcpy(&v, take(sizeof v), sizeof v);
        return v;
    }
    // An array of exactly `n` elements into `out`.
    template <class T>
    void get_array(T* out, std::size_t n) {
        const auto count = get<std::uint64_t>();
        require(count == n, "wire: an array of ", count, " elements where ", n, " were asked for");
        if (n) std::memcpy(out, take(n * sizeof(T)), n * sizeof(T));
    }
    // An array of any length up to `limit` elements.
    template <class T>
    std::vector<T> get_vector(std::size_t limit) {
        const auto count = get<std::uint64_t>();
        require(count <= limit, "wire: an array of ", count, " elements: the limit is ", limit);
        std::vector<T> out(count);
        if (count) std::memcpy(out.data(), take(count * sizeof(T)), count * sizeof(T));
        return out;
    }
    std::optional<std::string> get_string() {
        const bool present = get<std::uint8_t>() != 0;
        const auto chars = get_vector<char>(kMaxMessage);
        if (!present) return std::nullopt;
        return std::string(chars.begin(), chars.end());
    }

private:
    const std::byte* take(std::size_t n) {
        require(n <= bytes_.size() - at_, "wire: a message of ", bytes_.size(), " bytes ends before ", at_ + n);
        const std::byte* p = bytes_.data() + at_;
        at_ += n;
        return p;
    }
    std::span<const std::byte> bytes_;
    std::size_t at_ = 0;
};

// The rows a decode returns: one per pair, or with an outputs array (decode_outputs) one per pair it flags.
inline std::size_t rows_wanted(const std::uint8_t* outputs, std::size_t pairs) {
    if (!outputs) return pairs;
    std::size_t rows = 0;
    for (std::size_t i = 0; i < pairs; ++i) rows += outputs[i] != 0;
    return rows;
}

// Sends one message (MSG_NOSIGNAL: a peer gone is false, never SIGPIPE).
bool send_message(int fd, const std::vector<std::byte>& bytes);
enum class Received { message, closed, timed_out };
// Receives one message into `out`, waiting at most `timeout_ms` in all
// (< 0: forever). A length past kMaxMessage is an Error naming it.
Received receive_message(int fd, std::vector<std::byte>& out, int timeout_ms);

// The fork server's control messages (targets/isolation/fork_server.hpp):
// a few bytes with up to two descriptors passed along (SCM_RIGHTS).
bool send_control(int fd, std::span<const std::byte> bytes, std::span<const int> fds);
// -1: the peer is gone; else the bytes received, `fds` filled (-1 where none came).
long receive_control(int fd, std::span<std::byte> bytes, std::span<int> fds);

}  // namespace kvweld::targets::wire
