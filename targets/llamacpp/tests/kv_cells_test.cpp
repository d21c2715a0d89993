// The rule's model of a unified cache's cells (llamacpp_kv_cells.hpp),
// checked against llama.cpp's own account of them: with
// LLAMA_KV_CACHE_DEBUG=1, llama_kv_cache::find_slot logs the stream's
// used_max_p1, used cells and head before it places each ubatch and each
// loaded state. Random programs of the plugin's memory calls (the one table
// it runs, llamacpp_memory_steps.hpp), decodes, saves and loads, on fixed
// seeds: before every placement llama.cpp's three numbers must be the
// model's, a decode the model finds no slot for must fail and every other
// succeed, and every sequence's length must agree after each op. The model
// is never widened to fit llama.cpp: a disagreement prints the program.
#include "engine/model.hpp"
#include "targets/llamacpp/llamacpp_kv_cells.hpp"
#include "targets/llamacpp/tests/llama_test_model.hpp"
#include "util/rng.hpp"

#include <gtest/gtest.h>
#include <llama.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ostream>
#include <set>
#include <string>
#include <vector>

namespace kvweld {
namespace {

using llamacpp::KvCells;
namespace steps = targets::llama_steps;

// Built twice: against the pinned build, and against b11434+fixes, whose
// seq_add copies shared cells first (KVWELD_CELLS_UNSHARE).
#ifndef KVWELD_CELLS_UNSHARE
#define KVWELD_CELLS_UNSHARE 0
#endif
constexpr bool kUnshares = KVWELD_CELLS_UNSHARE;
constexpr int kCellSeqs = 6, kCellCount = 512, kCellUbatch = 32, kCellBatch = 256;

struct Logged {
    int n, used, head;
    bool operator==(const Logged&) const = default;
};
std::vector<Logged> g_logged;

// find_slot's debug line: "find_slot: stream[0], n = N, used = U, head = H, size = S, n_swa = W".
void capture(ggml_log_level, const char* text, void*) {
    const char* at = std::strstr(text, "find_slot: stream[");
    Logged l{};
    int stream = 0;
    if (at && std::sscanf(at, "find_slot: stream[%d], n = %d, used = %d, head = %d", &stream, &l.n, &l.used, &l.head) == 4)
        g_logged.push_back(l);
}

std::string str(const Logged& l) {
    return "used_max_p1 " + std::to_string(l.n) + ", used " + std::to_string(l.used) + ", head " + std::to_string(l.head);
}
std::ostream& operator<<(std::ostream& out, const Logged& l) { return out << str(l); }

class KvCellsModel : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        ::setenv("LLAMA_KV_CACHE_DEBUG", "1", 1);  // read when a cache is made
        llama_log_set(capture, nullptr);
        llama_backend_init();
    }
    void SetUp() override {
        lm_ = load_in_llama(model_, "cells");
        ASSERT_NE(lm_, nullptr);
    }
    void TearDown() override {
        if (ctx_) llama_free(ctx_);
        if (lm_) llama_model_free(lm_);
    }
    void make_context() {
        if (ctx_) llama_free(ctx_);
        llama_context_params cp = llama_context_default_params();
        cp.n_ctx = kCellCount;
        cp.n_seq_max = kCellSeqs;
        cp.n_batch = kCellBatch;
        cp.n_ubatch = kCellUbatch;
        cp.n_threads = cp.n_threads_batch = 1;
        cp.kv_unified = true;
        cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
        ctx_ = llama_init_from_model(lm_, cp);
        ASSERT_NE(ctx_, nullptr);
        ASSERT_EQ(int(llama_n_ctx(ctx_)), kCellCount);
    }
    llama_memory_t mem() const { return llama_get_memory(ctx_); }
    int length(int seq) const { return int(llama_memory_seq_pos_max(mem(), seq)) + 1; }

    // The llama.h calls, as the plugin runs them (run_steps).
    void run(const std::vector<steps::Step>& program, KvCells& cells) {
        for (const steps::Step& s : program) {
            switch (s.fn) {
                case steps::Fn::seq_rm: llama_memory_seq_rm(mem(), s.seq, s.p0, s.p1); break;
                case steps::Fn::seq_cp: llama_memory_seq_cp(mem(), s.seq, s.dst, s.p0, s.p1); break;
                case steps::Fn::seq_add: llama_memory_seq_add(mem(), s.seq, s.p0, s.p1, s.delta); break;
                case steps::Fn::clear: llama_memory_clear(mem(), true); break;
                case steps::Fn::seq_keep: llama_memory_seq_keep(mem(), s.seq); break;
            }
            llamacpp::apply_step(cells, s);
        }
    }
    // Every ubatch's placement against the model's state before it: the
    // model places the call's ubatches one by one to compare each. The
    // debug block logs its line once per sequence of the ubatch
    // (n_seqs_unq), each about the one stream.
    void expect_placements(const std::vector<Logged>& logged, KvCells cells,
                           const std::vector<std::vector<KvCells::Token>>& ubatches, const std::string& program) {
        std::size_t line = 0;
        for (std::size_t u = 0; u < ubatches.size(); ++u) {
            std::set<int> seqs;
            for (const KvCells::Token& t : ubatches[u]) seqs.insert(t.seq);
            const Logged want{cells.used_max_p1(), cells.used(), cells.head()};
            for (std::size_t k = 0; k < seqs.size(); ++k, ++line) {
                ASSERT_LT(line, logged.size()) << "llama.cpp logged " << logged.size() << " find_slot lines\n" << program;
                ASSERT_EQ(logged[line], want) << "ubatch " << u << ": llama.cpp " << str(logged[line]) << ", the model "
                                              << str(want) << "\n" << program;
            }
            ASSERT_TRUE(cells.place(ubatches[u])) << program;
        }
        ASSERT_EQ(line, logged.size()) << "llama.cpp logged more find_slot lines than the model's ubatches\n" << program;
    }

    const Model model_ = Model::random(config_by_name("tiny"), 43);
    llama_model* lm_ = nullptr;
    llama_context* ctx_ = nullptr;
};

// One random program per seed: decodes of one to three sequences (split
// into ubatches of 32, filling the cache to its end and past it), rewinds,
// clears, copies, keeps, context shifts, saves and loads, and clear_all.
TEST_F(KvCellsModel, FindSlotPlacesWhereTheModelSaysOnEverySeed) {
    int placements = 0, full = 0, windows_past_256 = 0;
    for (std::uint64_t seed = 1; seed <= 12; ++seed) {
        make_context();
        KvCells cells(kCellCount, kUnshares);
        Rng rng(seed);
        std::string program = "seed " + std::to_string(seed) + ":";
        std::vector<std::vector<std::uint8_t>> states;
        std::vector<std::vector<int>> state_positions;
        for (int op = 0; op < 160; ++op) {
            const int seq = int(rng.range(0, kCellSeqs - 1)), len = cells.length(seq);
            const int kind = int(rng.range(0, 19));
            if (kind < 11) {  // a decode
                std::vector<KvCells::Token> batch;
                const int n_seqs = int(rng.range(1, 3));
                for (int k = 0; k < n_seqs; ++k) {
                    const int s = (seq + k) % kCellSeqs, from = cells.length(s), n = int(rng.range(1, 40));
                    for (int i = 0; i < n; ++i) batch.push_back({s, from + i});
                }
                program += " decode(" + std::to_string(batch.size()) + " tokens from " + std::to_string(seq) + ")";
                llama_batch b = llama_batch_init(int(batch.size()), 0, 1);
                for (std::size_t i = 0; i < batch.size(); ++i) {
                    b.token[i] = llama_token((batch[i].seq * 7 + batch[i].pos * 3) % model_.config().vocab);
                    b.pos[i] = batch[i].pos;
                    b.n_seq_id[i] = 1;
                    b.seq_id[i][0] = batch[i].seq;
                    b.logits[i] = i + 1 == batch.size();
                }
                b.n_tokens = int(batch.size());
                std::vector<std::vector<KvCells::Token>> ubatches;
                for (std::size_t i = 0; i < batch.size(); i += kCellUbatch)
                    ubatches.emplace_back(batch.begin() + long(i), batch.begin() + long(std::min(batch.size(), i + kCellUbatch)));
                std::vector<std::span<const KvCells::Token>> spans(ubatches.begin(), ubatches.end());
                g_logged.clear();
                const int rc = llama_decode(ctx_, b);
                llama_batch_free(b);
                KvCells placed = cells;
                const bool fits = placed.place(spans);
                ASSERT_EQ(rc, fits ? 0 : 1) << "llama_decode returned " << rc << ", the model "
                                            << (fits ? "places the call" : "finds no slot") << "\n" << program;
                if (fits) {
                    expect_placements(g_logged, cells, ubatches, program);
                    placements += int(ubatches.size());
                    windows_past_256 += placed.n_kv() > 256;
                } else {
                    ++full;
                }
                cells = placed;
            } else if (kind < 13 && len > 0) {
                const int keep = int(rng.range(0, len - 1));
                program += " truncate(" + std::to_string(seq) + ", " + std::to_string(keep) + ")";
                run(steps::truncate(seq, keep), cells);
            } else if (kind < 14) {
                program += " clear(" + std::to_string(seq) + ")";
                run(steps::empty(seq), cells);
            } else if (kind < 15) {
                const int dst = (seq + 1 + int(rng.range(0, kCellSeqs - 2))) % kCellSeqs;
                program += " copy(" + std::to_string(seq) + ", " + std::to_string(dst) + ")";
                run(steps::copy(seq, dst), cells);
            } else if (kind < 17 && len > 1) {
                const int p0 = int(rng.range(0, len - 2)), p1 = int(rng.range(p0 + 1, len));
                program += " shift(" + std::to_string(seq) + ", " + std::to_string(p0) + ", " + std::to_string(p1) + ")";
                run(steps::shift(seq, p0, p1), cells);
            } else if (kind < 18 && len > 0) {
                program += " save(" + std::to_string(seq) + ")";
                std::vector<std::uint8_t> bytes(llama_state_seq_get_size(ctx_, seq));
                ASSERT_EQ(llama_state_seq_get_data(ctx_, bytes.data(), bytes.size(), seq), bytes.size());
                states.push_back(std::move(bytes));
                state_positions.push_back(cells.positions(seq));
            } else if (kind < 19 && !states.empty()) {
                const std::size_t id = std::size_t(rng.below(states.size()));
                program += " load(" + std::to_string(seq) + ", state " + std::to_string(id) + ")";
                g_logged.clear();
                const std::size_t read = llama_state_seq_set_data(ctx_, states[id].data(), states[id].size(), seq);
                KvCells loaded = cells;
                const bool fits = loaded.load(seq, state_positions[id]);
                ASSERT_EQ(read == states[id].size(), fits) << program;
                if (fits) {
                    KvCells emptied = cells;
                    emptied.seq_rm(seq, -1, -1);
                    std::vector<KvCells::Token> ubatch;
                    for (int p : state_positions[id]) ubatch.push_back({seq, p});
                    expect_placements(g_logged, emptied, {ubatch}, program);
                    cells = loaded;
                } else {
                    run(steps::empty(seq), cells);  // llama.cpp empties a sequence whose load failed
                }
            } else if (kind == 19 && rng.chance(0.25)) {
                program += rng.chance(0.5) ? " keep(" + std::to_string(seq) + ")" : " clear_all";
                run(program.back() == ')' ? steps::keep(seq) : steps::clear_all(), cells);
            }
            for (int s = 0; s < kCellSeqs; ++s)
                ASSERT_EQ(length(s), cells.length(s)) << "sequence " << s << "'s length\n" << program;
        }
    }
    // The programs reached what the rule needs: many placements, windows
    // past 256 cells, and a cache too full for a call.
    EXPECT_GT(placements, 500);
    EXPECT_GT(windows_past_256, 50);
    EXPECT_GT(full, 0);
    std::printf("placements %d, of which with a window past 256 cells %d; calls refused for a full cache %d\n",
                placements, windows_past_256, full);
}

}  // namespace
}  // namespace kvweld
