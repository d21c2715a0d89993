#include "targets/isolation/remote_table.hpp"

#include "targets/isolation/remote_process.hpp"
#include "targets/isolation/wire.hpp"
#include "util/cat.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <set>

namespace kvweld::targets::isolation {

namespace {

using wire::Fn;

// What a handle points at: the process and what its answers left behind.
struct Remote {
    Process process;
    std::int32_t vocab = 0;
    std::set<std::string> strings;  // twin_tolerance's reasons and live_settings_of's lists, kept for the engine's life
    std::map<std::pair<Fn, std::int32_t>, std::vector<std::byte>> ahead;  // answers sent ahead (wire.hpp)
};

Remote& remote(const kvweld_engine* e) { return *reinterpret_cast<Remote*>(const_cast<kvweld_engine*>(e)); }

void copy_error(const std::string& text, char* err, std::size_t len) {
    if (!err || len == 0) return;
    const std::size_t n = std::min(text.size(), len - 1);
    std::memcpy(err, text.data(), n);
    err[n] = '\0';
}

// One answer: its result, with the error text in err and the outputs read
// by `outputs` when it is 0; kProcessLost once the process is gone.
template <class Outputs>
int answer(const kvweld_engine* e, Fn fn, const std::vector<std::byte>& reply, char* err, std::size_t len,
           Outputs&& outputs) {
    Process& p = remote(e).process;
    try {
        wire::Reader in(reply);
        const auto rc = in.get<std::int32_t>();
        copy_error(in.get_string().value_or(""), err, len);
        if (rc == 0) outputs(in);
        return rc;
    } catch (const Error& broken) {
        p.abandon(cat("answered ", wire::name(fn), " with a broken message (", broken.what(), ")"));
        copy_error(p.lost(), err, len);
        return kProcessLost;
    }
}

// Sends one call and reads its answer (answer above).
template <class Outputs>
int ask(const kvweld_engine* e, const wire::Writer& call, char* err, std::size_t len, Outputs&& outputs) {
    Remote& r = remote(e);
    if (!wire::is_query(call.fn())) r.ahead.clear();
    const std::optional<std::vector<std::byte>> reply = r.process.exchange(call);
    if (!reply) {
        copy_error(r.process.lost(), err, len);
        return kProcessLost;
    }
    return answer(e, call.fn(), *reply, err, len, outputs);
}

// A query answered ahead (the first after a decode), or asked now.
template <class Outputs>
int ask_query(const kvweld_engine* e, const wire::Writer& call, std::int32_t key, char* err, std::size_t len,
              Outputs&& outputs) {
    Remote& r = remote(e);
    const auto it = r.ahead.find({call.fn(), key});
    if (it == r.ahead.end()) return ask(e, call, err, len, outputs);
    const std::vector<std::byte> reply = std::move(it->second);
    r.ahead.erase(it);
    return answer(e, call.fn(), reply, err, len, outputs);
}

int ask(const kvweld_engine* e, const wire::Writer& call, char* err, std::size_t len) {
    return ask(e, call, err, len, [](wire::Reader&) {});
}

// A call of one sequence-sized argument and nothing back: open, close,
// clear, keep, pool ops, warmup, abort.
template <Fn F>
int one_int(kvweld_engine* e, std::int32_t v, char* err, std::size_t len) {
    wire::Writer w(F);
    w.put(v);
    return ask(e, w, err, len);
}

template <Fn F>
int two_ints(kvweld_engine* e, std::int32_t a, std::int32_t b, char* err, std::size_t len) {
    wire::Writer w(F);
    w.put(a);
    w.put(b);
    return ask(e, w, err, len);
}

// A query of one int argument with one value back.
template <Fn F, class T>
int one_out(const kvweld_engine* e, std::int32_t v, T* out, char* err, std::size_t len) {
    wire::Writer w(F);
    w.put(v);
    return ask_query(e, w, v, err, len, [&](wire::Reader& in) { *out = in.get<T>(); });
}

int decode_call(kvweld_engine* e, Fn fn, const std::int32_t* seqs, const std::int32_t* tokens,
                const std::uint8_t* outputs, std::int32_t n, float* logits, char* err, std::size_t len) {
    wire::Writer w(fn);
    const auto count = std::size_t(std::max(n, 0));
    w.put_array(seqs, count);
    w.put_array(tokens, count);
    w.put_array(outputs, outputs ? count : 0);
    const std::size_t floats = wire::rows_wanted(outputs, count) * std::size_t(remote(e).vocab);
    return ask(e, w, err, len, [&](wire::Reader& in) {
        in.get_array(logits, floats);
        auto& ahead = remote(e).ahead;
        for (auto count = in.get<std::uint32_t>(); count > 0; --count) {
            const auto fn = in.get<Fn>();
            const auto key = in.get<std::int32_t>();
            ahead[{fn, key}] = in.get_vector<std::byte>(wire::kMaxMessage);
        }
    });
}

int decode(kvweld_engine* e, const std::int32_t* seqs, const std::int32_t* tokens, std::int32_t n, float* logits,
           char* err, std::size_t len) {
    return decode_call(e, Fn::decode, seqs, tokens, nullptr, n, logits, err, len);
}

int decode_outputs(kvweld_engine* e, const std::int32_t* seqs, const std::int32_t* tokens, const std::uint8_t* outputs,
                   std::int32_t n, float* logits, char* err, std::size_t len) {
    return decode_call(e, Fn::decode_outputs, seqs, tokens, outputs, n, logits, err, len);
}

void destroy(kvweld_engine* e) {
    std::unique_ptr<Remote> owned(&remote(e));
    owned->process.finish(wire::Writer(Fn::destroy));
}

std::int32_t vocab(const kvweld_engine* e) { return remote(e).vocab; }

int clear_all(kvweld_engine* e, char* err, std::size_t len) { return ask(e, wire::Writer(Fn::clear_all), err, len); }

int counters(const kvweld_engine* e, kvweld_engine_counters* out, char* err, std::size_t len) {
    return ask_query(e, wire::Writer(Fn::counters), 0, err, len,
                     [&](wire::Reader& in) { *out = in.get<kvweld_engine_counters>(); });
}

int reload(kvweld_engine* e, const char* path, char* err, std::size_t len) {
    wire::Writer w(Fn::reload);
    w.put_string(path);
    return ask(e, w, err, len);
}

int storage(const kvweld_engine* e, std::int32_t seq, std::int32_t which, std::uint64_t* out, std::int32_t n_layers,
            char* err, std::size_t len) {
    wire::Writer w(Fn::storage);
    w.put(seq);
    w.put(which);
    w.put(n_layers);
    return ask(e, w, err, len, [&](wire::Reader& in) { in.get_array(out, std::size_t(std::max(n_layers, 0))); });
}

int read_kv(const kvweld_engine* e, std::int32_t seq, std::int32_t layer, std::int32_t pos, float* k, float* v,
            std::int32_t kv_dim, char* err, std::size_t len) {
    wire::Writer w(Fn::read_kv);
    for (const std::int32_t a : {seq, layer, pos, kv_dim}) w.put(a);
    return ask(e, w, err, len, [&](wire::Reader& in) {
        in.get_array(k, std::size_t(std::max(kv_dim, 0)));
        in.get_array(v, std::size_t(std::max(kv_dim, 0)));
    });
}

int pool_info(const kvweld_engine* e, kvweld_pool_info* out, char* err, std::size_t len) {
    return ask(e, wire::Writer(Fn::pool_info), err, len, [&](wire::Reader& in) { *out = in.get<kvweld_pool_info>(); });
}

int block_table(const kvweld_engine* e, std::int32_t seq, std::int32_t* out, std::int32_t cap, std::int32_t* n,
                char* err, std::size_t len) {
    wire::Writer w(Fn::block_table);
    w.put(seq);
    w.put(cap);
    return ask(e, w, err, len, [&](wire::Reader& in) {
        *n = in.get<std::int32_t>();
        in.get_array(out, std::size_t(std::clamp(*n, 0, std::max(cap, 0))));
    });
}

int set_loras(kvweld_engine* e, const char* const* paths, const float* scales, std::int32_t n, char* err,
              std::size_t len) {
    wire::Writer w(Fn::set_loras);
    w.put(n);
    for (std::int32_t i = 0; i < n; ++i) w.put_string(paths[i]);
    w.put_array(scales, std::size_t(std::max(n, 0)));
    return ask(e, w, err, len);
}

int set_cvec(kvweld_engine* e, const float* data, std::size_t n, std::int32_t n_embd, std::int32_t il_start,
             std::int32_t il_end, char* err, std::size_t len) {
    wire::Writer w(Fn::set_cvec);
    w.put(std::uint8_t(data != nullptr));
    w.put_array(data, data ? n : 0);
    for (const std::int32_t a : {n_embd, il_start, il_end}) w.put(a);
    return ask(e, w, err, len);
}

double twin_tolerance(const kvweld_engine* e, const char** why) {
    double t = 0.0;
    *why = nullptr;
    char ignored[1];
    ask(e, wire::Writer(Fn::twin_tolerance), ignored, sizeof ignored, [&](wire::Reader& in) {
        t = in.get<double>();
        if (const auto text = in.get_string()) *why = remote(e).strings.insert(*text).first->c_str();
    });
    return t;
}

int shift(kvweld_engine* e, std::int32_t seq, std::int32_t p0, std::int32_t p1, char* err, std::size_t len) {
    wire::Writer w(Fn::shift);
    for (const std::int32_t a : {seq, p0, p1}) w.put(a);
    return ask(e, w, err, len);
}

int state_save(kvweld_engine* e, std::int32_t seq, std::uint8_t* out, std::size_t cap, std::size_t* n, char* err,
               std::size_t len) {
    wire::Writer w(Fn::state_save);
    w.put(seq);
    w.put(std::uint64_t(out ? cap : 0));
    return ask(e, w, err, len, [&](wire::Reader& in) {
        *n = std::size_t(in.get<std::uint64_t>());
        in.get_array(out, out ? std::min(*n, cap) : 0);
    });
}

int state_load(kvweld_engine* e, std::int32_t seq, const std::uint8_t* data, std::size_t n, char* err, std::size_t len) {
    wire::Writer w(Fn::state_load);
    w.put(seq);
    w.put_array(data, n);
    return ask(e, w, err, len);
}

int set_live(kvweld_engine* e, const char* key, const char* value, char* err, std::size_t len) {
    wire::Writer w(Fn::set_live);
    w.put_string(key);
    w.put_string(value);
    return ask(e, w, err, len);
}

int read_embeddings(const kvweld_engine* e, std::int32_t row, float* out, std::int32_t n_embd, char* err,
                    std::size_t len) {
    wire::Writer w(Fn::read_embeddings);
    w.put(row);
    w.put(n_embd);
    return ask(e, w, err, len, [&](wire::Reader& in) { in.get_array(out, std::size_t(std::max(n_embd, 0))); });
}

int set_sampler(kvweld_engine* e, std::int32_t seq, const kvweld_sampler* s, std::int32_t in_place, char* err,
                std::size_t len) {
    wire::Writer w(Fn::set_sampler);
    w.put(seq);
    w.put(std::uint8_t(s != nullptr));
    w.put(s ? *s : kvweld_sampler{});
    w.put(in_place);
    return ask(e, w, err, len);
}

std::int32_t takes_live(const kvweld_engine* e, const char* key, const char* value) {
    wire::Writer w(Fn::takes_live);
    w.put_string(key);
    w.put_string(value);
    std::int32_t out = 0;
    char ignored[1];
    ask(e, w, ignored, sizeof ignored, [&](wire::Reader& in) { out = in.get<std::int32_t>(); });
    return out;
}

const char* live_settings_of(const kvweld_engine* e) {
    const char* out = nullptr;
    char ignored[1];
    ask(e, wire::Writer(Fn::live_settings_of), ignored, sizeof ignored, [&](wire::Reader& in) {
        if (const auto text = in.get_string()) out = remote(e).strings.insert(*text).first->c_str();
    });
    return out;
}

template <class F>
void proxy(F*& slot, F* stub) {
    if (slot) slot = stub;
}

}  // namespace

// Every engine function of the table (a new one added to engine_abi.h and
// not proxied here would be called in this process with a handle it does
// not understand: the size check below names this place).
kvweld_engine_api remote_table(const kvweld_engine_api& real) {
    static_assert(sizeof(kvweld_engine_api) == 432, "a new field in kvweld_engine_api: proxy it here if it takes an engine");
    kvweld_engine_api t = real;
    t.create = nullptr;  // remote_create, which knows the plugin's path
    t.create_v16 = nullptr;
    proxy(t.destroy, &destroy);
    proxy(t.vocab, &vocab);
    proxy(t.open_seq, &one_int<Fn::open_seq>);
    proxy(t.close_seq, &one_int<Fn::close_seq>);
    proxy(t.decode, &decode);
    proxy(t.truncate, &two_ints<Fn::truncate>);
    proxy(t.clear_seq, &one_int<Fn::clear_seq>);
    proxy(t.clear_all, &clear_all);
    proxy(t.copy_seq, &two_ints<Fn::copy_seq>);
    proxy(t.counters, &counters);
    proxy(t.reload, &reload);
    proxy(t.storage, &storage);
    proxy(t.read_kv, &read_kv);
    proxy(t.swap_layer, &two_ints<Fn::swap_layer>);
    proxy(t.pool_info, &pool_info);
    proxy(t.block_table, &block_table);
    proxy(t.block_refcount, &one_out<Fn::block_refcount, std::int32_t>);
    proxy(t.pool_op, &one_int<Fn::pool_op>);
    proxy(t.plan_serial, &one_out<Fn::plan_serial, std::uint64_t>);
    proxy(t.set_loras, &set_loras);
    proxy(t.set_cvec, &set_cvec);
    proxy(t.decode_outputs, &decode_outputs);
    proxy(t.set_warmup, &one_int<Fn::set_warmup>);
    proxy(t.twin_tolerance, &twin_tolerance);
    proxy(t.shift, &shift);
    proxy(t.state_save, &state_save);
    proxy(t.state_load, &state_load);
    proxy(t.set_live, &set_live);
    proxy(t.read_embeddings, &read_embeddings);
    proxy(t.set_sampler, &set_sampler);
    proxy(t.sampled, &one_out<Fn::sampled, std::int32_t>);
    proxy(t.set_abort, &one_int<Fn::set_abort>);
    proxy(t.seq_length, &one_out<Fn::seq_length, std::int32_t>);
    proxy(t.live_settings_of, &live_settings_of);
    proxy(t.keep_seq, &one_int<Fn::keep_seq>);
    proxy(t.takes_live, &takes_live);
    return t;
}

int remote_create(const std::string& plugin, const kvweld_engine_options& o, const GivenSettings& settings,
                  int timeout_ms, kvweld_engine** out, char* err, size_t err_len) {
    auto r = std::make_unique<Remote>();
    try {
        r->process.start(plugin, timeout_ms);
    } catch (const Error& e) {
        copy_error(e.what(), err, err_len);
        return -1;
    }
    wire::Writer w(Fn::create);
    w.put_string(o.model_path);
    for (const std::int32_t a : {o.n_ctx, o.n_seq_max, o.threads}) w.put(a);
    w.put(std::uint64_t(settings.entries().size()));
    for (const kvweld_given& g : settings.entries()) {
        w.put(g.kind);
        w.put_string(g.name);
        w.put_string(g.value);
    }
    *out = reinterpret_cast<kvweld_engine*>(r.get());
    Remote& mine = *r.release();
    return ask(*out, w, err, err_len, [&](wire::Reader& in) { mine.vocab = in.get<std::int32_t>(); });
}

std::string remote_crash_title(const kvweld_engine* engine) { return remote(engine).process.crash_title(); }

}  // namespace kvweld::targets::isolation
