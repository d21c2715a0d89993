#include "targets/kvweld/dense_engine.hpp"

#include "util/cat.hpp"
#include "util/error.hpp"
#include "engine/kv_state.hpp"
#include "targets/abi_lists.hpp"

#include <algorithm>
#include <cstring>
#include <utility>

namespace kvweld::targets {

DenseSettings dense_settings(const std::string& params) {
    std::map<std::string, std::string> p;
    try {
        p = abi::parse_params(params.c_str(), {"policy", "backend", "reuse"});
    } catch (const std::runtime_error& e) {
        throw Error(e.what());
    }
    DenseSettings out;
    if (const auto it = p.find("policy"); it != p.end()) out.policy = rebind_policy_from_string(it->second);
    if (const auto it = p.find("backend"); it != p.end()) out.backend = backend_from_string(it->second);
    if (const auto it = p.find("reuse"); it != p.end()) {
        require(it->second == "0" || it->second == "1", "setting reuse=", it->second, ": must be 0 or 1");
        out.reuse = it->second == "1";
    }
    return out;
}

namespace {

// A copy of `model` in `memory`.
Model copy_into(const Model& model, RecyclingResource* memory) {
    Model out = Model::zeros(model.config(), model.shared_classifier(), memory);
    const std::span<const float> from = model.all_weights();
    std::copy(from.begin(), from.end(), out.all_weights_mut().begin());
    return out;
}

}  // namespace

DenseEngine::DenseEngine(const Model& model, const EngineSetup& setup, FaultSet faults)
    : setup_(setup), faults_(faults) {
    const int max_ctx = model.config().max_seq_len;
    require(setup.n_ctx >= 1 && setup.n_ctx <= max_ctx, "n_ctx = ", setup.n_ctx, ": must be in 1..", max_ctx);
    require(setup.seqs >= 1 && setup.seqs <= 4096, "sequences = ", setup.seqs, ": must be in 1..4096");
    const DenseSettings settings = dense_settings(setup.params);
    session_options_ = {.policy = settings.policy,
                        .replan_every_token = !settings.reuse,
                        .backend = settings.backend,
                        .threads = std::max(1, setup.threads)};
    std::string why;
    require(settings.backend != Backend::cuda || cuda_backend_available(&why), "backend=cuda: ", why);
    const ScopedFaults scoped(faults_);  // refuses switches this build cannot turn on
    model_.emplace(copy_into(model, memory_.get()));
    model_digest_ = weight_digest(*model_);
}

DenseEngine::Slot& DenseEngine::slot(int seq) {
    const auto it = slots_.find(seq);
    require(it != slots_.end() && it->second.open, "sequence ", seq, " is not open");
    return it->second;
}

const DenseEngine::Slot& DenseEngine::slot(int seq) const { return const_cast<DenseEngine*>(this)->slot(seq); }

KvCache DenseEngine::fresh_cache(int capacity) const {
    KvGeometry g = KvGeometry::of(model_->config());
    g.max_seq_len = capacity;
    return KvCache::with_capacity(g);
}

void DenseEngine::apply(const MemoryCall& call) { apply_to_members(*this, call); }

void DenseEngine::open(int seq) { open_sized(seq, setup_.n_ctx, false); }

void DenseEngine::open_sized(int seq, int capacity, bool recycle) {
    require(seq >= 0 && seq < setup_.seqs, "sequence ", seq, " out of range 0..", setup_.seqs - 1);
    require(capacity >= 1 && capacity <= setup_.n_ctx, "capacity ", capacity, " out of range 1..", setup_.n_ctx);
    auto [it, inserted] = slots_.try_emplace(seq, session_options_);
    Slot& s = it->second;
    require(!s.open, "sequence ", seq, " is already open");
    if (recycle) {
        require(s.cache && s.cache->geometry().max_seq_len == capacity, "sequence ", seq,
                " kept no storage of capacity ", capacity, " to recycle");
        const ScopedFaults scoped(faults_);
        s.cache->truncate_to(0);  // the same storage: the plan stays valid
    } else {
        s.cache = fresh_cache(capacity);
    }
    s.open = true;
}

// The slot keeps its session (the plan is held into the next request) and its storage.
void DenseEngine::close(int seq) { slot(seq).open = false; }

// Checked whole before any pair is decoded, so a refused call changes
// nothing: every sequence open, every token in the vocabulary, and no
// sequence fed past its capacity.
void DenseEngine::require_batch(std::span<const std::int32_t> seqs, std::span<const std::int32_t> tokens) {
    require(seqs.size() == tokens.size(), "decode: ", seqs.size(), " sequences for ", tokens.size(), " tokens");
    const int v = vocab();
    std::map<int, int> fed;
    for (std::size_t i = 0; i < seqs.size(); ++i) {
        const KvCache& c = *slot(seqs[i]).cache;
        require(tokens[i] >= 0 && tokens[i] < v, "pair ", i, ": token ", tokens[i], " out of range 0..", v - 1);
        const int at = c.cached_len() + fed[seqs[i]]++;
        require(at < c.geometry().max_seq_len, "pair ", i, ": sequence ", seqs[i], " is full: its capacity is ",
                c.geometry().max_seq_len);
    }
}

namespace {

// The pairs of a call in the order they run: each its own unit with causal
// attention; without it, each sequence's pairs one unit (a span attending
// to itself whole), the sequences in order of first appearance.
std::vector<std::vector<std::size_t>> units_of(std::span<const std::int32_t> seqs, bool causal) {
    std::vector<std::vector<std::size_t>> units;
    std::map<int, std::size_t> unit_of;
    for (std::size_t i = 0; i < seqs.size(); ++i) {
        const auto [it, fresh] = unit_of.try_emplace(seqs[i], units.size());
        if (causal || fresh) units.emplace_back();
        units[causal ? units.size() - 1 : it->second].push_back(i);
    }
    return units;
}

}  // namespace

// The plan decodes one token per run whatever rows are wanted: the output
// count is no part of its key (llama.cpp's graph has it in its shape).
// Causal attention off, a sequence's tokens in the call run as one span.
std::vector<float> DenseEngine::decode(std::span<const std::int32_t> seqs, std::span<const std::int32_t> tokens,
                                       std::span<const std::uint8_t> outputs) {
    const ScopedFaults scoped(faults_);
    require_batch(seqs, tokens);
    require(outputs.empty() || outputs.size() == seqs.size(), "decode: ", outputs.size(), " output flags for ",
            seqs.size(), " pairs");
    const auto v = static_cast<std::size_t>(vocab());
    const auto dim = static_cast<std::size_t>(model_->config().dim);
    struct Row {
        std::vector<float> logits, hidden;
        bool built = false;  // its plan was built for the unit it ran in
    };
    std::vector<Row> rows(seqs.size());
    const int abort_after = std::exchange(abort_after_, -1);  // armed for this call only
    std::size_t done = 0;
    const std::vector<std::vector<std::size_t>> units = units_of(seqs, causal_);
    for (std::size_t u = 0; u < units.size(); ++u) {
        Slot& s = slot(seqs[units[u][0]]);
        if (abort_after >= 0 && int(u) >= abort_after) {
            if (fault_on(Fault::abort_keeps_stopped)) s.cache->advance();
            throw Aborted(cat("decode: aborted by the abort callback before ", causal_ ? "pair " : "the span of pair ",
                              units[u][0], " of ", seqs.size(), " (", done, " decoded and kept)"));
        }
        const std::uint64_t builds = s.session.counters().builds;
        const auto keep = [&](std::size_t k, std::span<const float> row) {
            Row& r = rows[units[u][k]];
            r.built = k == 0 && s.session.counters().builds != builds;
            if (!outputs.empty() && !outputs[units[u][k]]) return;  // its row is not returned
            r.logits.assign(row.begin(), row.end());
            if (embeddings_) {
                const std::span<const float> hidden = s.session.plan()->hidden();
                r.hidden.assign(hidden.begin(), hidden.begin() + long(dim));
            }
        };
        if (units[u].size() == 1 && causal_) {
            keep(0, s.session.decode(*model_, *s.cache, tokens[units[u][0]], adapters_));
        } else {
            std::vector<int> span;
            for (std::size_t i : units[u]) span.push_back(tokens[i]);
            s.session.decode_span(*model_, *s.cache, span, adapters_, causal_, keep);
        }
        done += units[u].size();
    }
    std::vector<float> logits;
    logits.reserve(seqs.size() * v);
    embedded_.clear();
    sampled_.clear();
    for (std::size_t i = 0; i < seqs.size(); ++i) {
        if (!outputs.empty() && !outputs[i]) continue;
        logits.insert(logits.end(), rows[i].logits.begin(), rows[i].logits.end());
        sampled_.push_back(sample_row(seqs[i], slot(seqs[i]), rows[i].built, rows[i].logits));
        embedded_.insert(embedded_.end(), rows[i].hidden.begin(), rows[i].hidden.end());
    }
    return logits;
}

std::vector<float> DenseEngine::embeddings(int row, int n_embd) const {
    require(embeddings_, "embeddings: off (the live setting embeddings=1 turns them on)");
    const auto dim = std::size_t(model_->config().dim);
    require(n_embd == int(dim), "embeddings: n_embd ", n_embd, ", the model's dim is ", dim);
    const int rows = int(embedded_.size() / dim);
    require(row >= 0 && row < rows, "embeddings: row ", row, " out of range: the last call returned ", rows,
            " rows with embeddings");
    return {embedded_.begin() + long(std::size_t(row) * dim), embedded_.begin() + long(std::size_t(row + 1) * dim)};
}

// The row's token from its sequence's chain (-1: none). A plan that bakes
// the chain in (the fault) takes it at its build and samples with that copy.
int DenseEngine::sample_row(int seq, Slot& s, bool built, std::span<const float> row) {
    const auto it = samplers_.find(seq);
    if (!fault_on(Fault::sampler_baked)) return it == samplers_.end() ? -1 : it->second.sample(row);
    if (built)
        s.baked = it == samplers_.end() ? std::nullopt : std::optional<Sampler>(it->second);
    return s.baked ? s.baked->sample(row) : -1;
}

void DenseEngine::set_sampler(int seq, const SamplerSpec* spec, bool in_place) {
    require(seq >= 0 && seq < setup_.seqs, "set_sampler: sequence ", seq, " out of range 0..", setup_.seqs - 1);
    if (!spec) {
        samplers_.erase(seq);
        return;
    }
    require_sampler(*spec, vocab());
    require(!in_place || samplers_.count(seq), "set_sampler: sequence ", seq,
            " holds no chain to change in place");
    samplers_.insert_or_assign(seq, Sampler(*spec));
}

void DenseEngine::set_abort(int after) { abort_after_ = after < 0 ? -1 : after; }

int DenseEngine::seq_length(int seq) const { return slot(seq).cache->cached_len(); }

int DenseEngine::sampled(int row) const {
    require(row >= 0 && std::size_t(row) < sampled_.size(), "sampled: row ", row,
            " out of range: the last call returned ", sampled_.size(), " rows");
    return sampled_[std::size_t(row)];
}

void DenseEngine::truncate(int seq, int n) {
    const ScopedFaults scoped(faults_);
    slot(seq).cache->truncate_to(n);
}

void DenseEngine::shift(int seq, int p0, int p1) {
    const ScopedFaults scoped(faults_);
    slot(seq).cache->shift(p0, p1);
}

std::vector<std::uint8_t> DenseEngine::state_save(int seq) {
    const ScopedFaults scoped(faults_);
    KvCache& c = *slot(seq).cache;
    c.settle(model_->config().rope_theta);
    return export_kv_state(c, model_digest_);
}

void DenseEngine::state_load(int seq, std::span<const std::uint8_t> bytes) {
    const ScopedFaults scoped(faults_);
    import_kv_state(*slot(seq).cache, bytes, model_digest_);
}

void DenseEngine::clear(int seq) {
    const ScopedFaults scoped(faults_);
    slot(seq).cache->clear();
}

// Every other open slot that holds positions emptied (one that holds
// none keeps its storage); `seq` must be open (slot() names it).
void DenseEngine::keep(int seq) {
    const ScopedFaults scoped(faults_);
    slot(seq);
    for (auto& [id, s] : slots_)
        if (s.open && id != seq && s.cache->cached_len() > 0) s.cache->clear();
}

void DenseEngine::clear_all() {
    const ScopedFaults scoped(faults_);
    for (auto& [id, s] : slots_)
        if (s.open) s.cache->clear();
    for (auto& [seq, sampler] : samplers_) sampler = Sampler(sampler.spec());  // draws restarted (engine_abi.h)
}

// dst gets storage of its own holding src's rows, at src's capacity (new storage, new id).
void DenseEngine::copy(int src, int dst) {
    require(src != dst, "copy_seq: source and destination are both sequence ", src);
    const ScopedFaults scoped(faults_);
    KvCache& from = *slot(src).cache;
    Slot& to = slot(dst);
    from.settle(model_->config().rope_theta);  // the copy holds the rows as plans read them
    KvCache copy = fresh_cache(from.geometry().max_seq_len);
    for (int l = 0; l < copy.n_layers(); ++l) {
        KvStorage& layer = *from.layer(l);
        if (layer.device()) layer.device()->download(layer, 0, from.cached_len());  // the device copy is current
        copy.set_layer(l, layer.copy());
    }
    for (int i = 0; i < from.cached_len(); ++i) copy.advance();
    to.cache = std::move(copy);
}

// Checked before anything changes; the old model is freed first so the new
// one can take its address. Every open sequence is emptied (new storage).
void DenseEngine::reload(const Model& model) {
    require(model.config() == model_->config(), "reload: a model of another shape (", model.config().describe(),
            "; this engine's is ", model_->config().describe(), ")");
    const ScopedFaults scoped(faults_);
    model_.reset();
    model_.emplace(copy_into(model, memory_.get()));
    model_digest_ = weight_digest(*model_);
    for (auto& [id, s] : slots_)
        if (s.open) s.cache->clear();
}

std::vector<std::uint64_t> DenseEngine::storage(int seq, int which, int n_layers) const {
    const Slot& s = slot(seq);
    require(n_layers == s.cache->n_layers(), "storage: ", n_layers, " layers asked for, the model has ",
            s.cache->n_layers());
    require(which == KVWELD_STORAGE_HELD || which == KVWELD_STORAGE_PLAN, "storage: which = ", which);
    const std::vector<StorageSerial> serials =
        which == KVWELD_STORAGE_HELD ? s.cache->storage_serials() : s.session.bound_serials();
    std::vector<std::uint64_t> out(std::size_t(n_layers), 0);
    for (std::size_t l = 0; l < out.size() && l < serials.size(); ++l) out[l] = serials[l].get();
    return out;
}

// A row read between a shift and the next decode is read as it will be
// decoded over: the owed rotations are applied first.
void DenseEngine::read_kv(int seq, int layer, int pos, std::span<float> k, std::span<float> v) const {
    KvCache& c = *const_cast<DenseEngine*>(this)->slot(seq).cache;
    c.settle(model_->config().rope_theta);
    require(layer >= 0 && layer < c.n_layers(), "read_kv: layer ", layer, " out of range 0..", c.n_layers() - 1);
    require(pos >= 0 && pos < c.cached_len(), "read_kv: position ", pos, " out of range 0..", c.cached_len() - 1);
    KvStorage& storage = *c.layer(layer);
    require(k.size() == std::size_t(storage.kv_dim()) && v.size() == k.size(), "read_kv: kv_dim ", k.size(),
            ", the model's is ", storage.kv_dim());
    if (storage.device()) storage.device()->download(storage, pos, 1);
    std::copy_n(storage.key_row(pos), k.size(), k.begin());
    std::copy_n(storage.value_row(pos), v.size(), v.begin());
}

void DenseEngine::swap_layer(int seq, int layer) {
    KvCache& c = *slot(seq).cache;
    require(layer >= 0 && layer < c.n_layers(), "swap_layer: layer ", layer, " out of range 0..", c.n_layers() - 1);
    const ScopedFaults scoped(faults_);
    KvStorage& from = *c.layer(layer);
    if (from.device()) from.device()->download(from, 0, c.cached_len());
    c.set_layer(layer, from.copy());
}

std::optional<kvweld_engine_counters> DenseEngine::counters() const {
    kvweld_engine_counters out{};
    for (const auto& [id, s] : slots_) {
        out.builds += s.session.counters().builds;
        out.reused += s.session.counters().kept;
        out.rebound += s.session.counters().rebinds;
    }
    return out;
}

std::uint64_t DenseEngine::plan_serial(int seq) const { return slot(seq).session.plan_serial().get(); }

kvweld_pool_info DenseEngine::pool_info() const { throw Error("engine kvweld has no paged KV pool"); }
std::vector<int> DenseEngine::block_table(int) const { throw Error("engine kvweld has no paged KV pool"); }
int DenseEngine::block_refcount(int) const { throw Error("engine kvweld has no paged KV pool"); }
void DenseEngine::pool_op(int) { throw Error("engine kvweld has no paged KV pool"); }

std::vector<KvLayer> DenseEngine::held_layers(int seq) const {
    const KvCache& c = *slot(seq).cache;
    std::vector<KvLayer> out;
    for (int l = 0; l < c.n_layers(); ++l) out.push_back(c.layer(l));
    return out;
}

void DenseEngine::set_loras(std::span<const LoraUse> uses) {
    adapters_.set_loras(model_->config(), std::vector<LoraUse>(uses.begin(), uses.end()));
}

void DenseEngine::set_warmup(bool on) { adapters_.set_warmup(on); }

// The CUDA plan attends causally only (Plan::run_span): there it lists no causal_attn.
std::string DenseEngine::live_settings() const {
    return session_options_.backend == Backend::cpu ? abi::kThreadsEmbeddingsCausal : abi::kThreadsAndEmbeddings;
}

void DenseEngine::set_live(const std::string& key, const std::string& value) {
    int threads = 0;
    try {
        if (key == abi::kEmbeddingsKey) {
            embeddings_ = abi::embeddings_value(value.c_str());
            embedded_.clear();
            return;
        }
        if (key == abi::kCausalKey && session_options_.backend == Backend::cpu) {
            causal_ = abi::flag_value(key.c_str(), value.c_str());
            return;
        }
        threads = abi::threads_value(key.c_str(), value.c_str(), live_settings().c_str());
    } catch (const std::runtime_error& e) {
        throw Error(e.what());
    }
    const ScopedFaults scoped(faults_);
    session_options_.threads = threads;
    for (auto& [seq, s] : slots_) s.session.set_threads(threads);
}

void DenseEngine::set_cvec(const ControlVector* cvec) {
    adapters_.set_cvec(model_->config(), cvec ? std::optional<ControlVector>(*cvec) : std::nullopt);
}

void DenseEngine::migrate(int from, int to) {
    Slot& src = slot(from);
    require(to >= 0 && to < setup_.seqs, "migrate: sequence ", to, " out of range 0..", setup_.seqs - 1);
    auto [it, inserted] = slots_.try_emplace(to, session_options_);
    require(!it->second.open, "migrate: sequence ", to, " is open");
    it->second.cache = std::move(src.cache);
    it->second.open = true;
    src.cache.reset();
    src.open = false;
}

}  // namespace kvweld::targets
