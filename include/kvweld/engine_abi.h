/* kvweld's engine plugin ABI, version 16 (plugins of versions 2 to 13 still load, and
 * from version 14 on, newer ones too: a table is read by its struct_size).
 * What each version added: docs/ENGINES.md, "ABI history".
 *
 * An engine kvweld did not write is loaded as a shared library that exports
 * one symbol, `kvweld_engine_entry`, returning a table of functions. The
 * harness writes the model file (in the format the engine names), opens
 * sequences (slots), decodes batches of (sequence, token) pairs and reads
 * back one row of logits per pair, truncates and clears sequences, and, where
 * the engine declares the capability, copies sequences and reads its plan
 * counters, and reloads the model. It computes its reference from the same
 * weights.
 *
 * Every function that can fail returns 0 on success, non-zero on failure,
 * and then writes a NUL-terminated message of at most err_len bytes to err.
 * No function may throw across this boundary or abort the process.
 *
 * A refusal's message names the bad value as the number it was given, in
 * decimal ("truncate to 12 past the length 9", not "n too large"): the
 * harness checks each refusal it provokes by finding that number in the
 * message, whole (not the 1 of 12 or of -1). A bad shape may be named by
 * the tensor it is wrong in instead. A refused call changes nothing.
 */
#ifndef KVWELD_ENGINE_ABI_H
#define KVWELD_ENGINE_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What each version added, and which older plugins still load: the ABI
 * history in docs/ENGINES.md ("ABI history"), its one place. A field
 * below names the version that added it. */
#define KVWELD_ENGINE_ABI_VERSION 16u

/* Optional capabilities, or-ed into kvweld_engine_api.capabilities. */
#define KVWELD_CAP_COPY_SEQ 0x1u      /* copy_seq is implemented */
#define KVWELD_CAP_PLAN_COUNTERS 0x2u /* counters is implemented */
#define KVWELD_CAP_RELOAD 0x4u        /* reload is implemented */
#define KVWELD_CAP_STORAGE 0x8u       /* storage is implemented (the weld and ledger oracles) */
#define KVWELD_CAP_READ_KV 0x10u      /* read_kv is implemented (the KV content oracle) */
#define KVWELD_CAP_SWAP_LAYER 0x20u   /* swap_layer is implemented (offload and restore) */
#define KVWELD_CAP_BLOCKS 0x40u       /* pool_info, block_table, block_refcount (paged KV: the block ledger) */
#define KVWELD_CAP_POOL_OPS 0x80u     /* pool_op: compact and grow the KV pool */
#define KVWELD_CAP_PLAN_SERIAL 0x100u /* version 4: plan_serial is implemented */
#define KVWELD_CAP_LORA 0x200u        /* version 5: set_loras is implemented */
#define KVWELD_CAP_CVEC 0x400u        /* version 5: set_cvec is implemented */
#define KVWELD_CAP_OUTPUTS 0x800u     /* version 5: decode_outputs is implemented */
#define KVWELD_CAP_MOE 0x1000u        /* version 6: loads models with experts (GGUF llama.expert_count) */
#define KVWELD_CAP_WARMUP 0x2000u     /* version 6: set_warmup is implemented */
#define KVWELD_CAP_SHIFT 0x4000u      /* version 7: shift is implemented (context shift) */
#define KVWELD_CAP_STATE 0x8000u      /* version 7: state_save and state_load are implemented */
#define KVWELD_CAP_EMBEDDINGS 0x10000u /* version 10: live setting embeddings:0|1 and read_embeddings */
#define KVWELD_CAP_SAMPLERS 0x20000u   /* version 11: set_sampler and sampled (backend samplers per sequence) */
#define KVWELD_CAP_ABORT 0x40000u      /* version 12: set_abort and seq_length (an abort callback) */
#define KVWELD_CAP_KEEP 0x80000u       /* version 14: keep_seq (llama.cpp's llama_memory_seq_keep) */
/* Version 12: what decode and decode_outputs return when the abort callback
 * (set_abort) stopped the call part way (llama.cpp's llama_decode returns 2). */
#define KVWELD_ABORTED 2

typedef struct kvweld_engine kvweld_engine; /* the plugin's own state */

/* Version 16: one setting the host gives create_v16, as data: a param and
 * its value, or a fault switch to turn on. Each names one of the plugin's
 * own settings (api.settings, version 15), checked by the host before
 * create: a param at most once, with a value among its listed values
 * where it lists some; a fault switch the plugin declared. */
typedef struct kvweld_given {
    int32_t kind;      /* KVWELD_SETTING_PARAM or KVWELD_SETTING_FAULT */
    const char* name;
    const char* value; /* PARAM: its value; FAULT: NULL */
} kvweld_given;

typedef struct kvweld_engine_options {
    const char* model_path; /* a file the harness wrote, in api.model_format */
    int32_t n_ctx;          /* positions per sequence */
    int32_t n_seq_max;      /* sequences open at once: ids are 0..n_seq_max-1 */
    int32_t threads;
    /* Before version 16 (create): fault switches to turn on,
     * comma-separated names, NULL or "" for none (an engine without fault
     * switches refuses any: create fails); and engine settings,
     * comma-separated key=value pairs the engine names in its
     * documentation (e.g. "kv_unified=1"), NULL or "" for defaults (an
     * unknown key or a bad value is a create failure naming it). NULL for
     * create_v16, which reads `given` instead. */
    const char* faults;
    const char* params;
    /* Version 16, for create_v16 and the rule_create of a plugin that has
     * it: the faults and params as data, n_given entries (NULL and 0 for
     * none): nothing to parse. A param not given takes its default. */
    const kvweld_given* given;
    int32_t n_given;
} kvweld_engine_options;

typedef struct kvweld_engine_counters {
    uint64_t builds;  /* plans (graphs) built */
    uint64_t reused;  /* plans run again as they were kept */
    uint64_t rebound; /* plans re-pointed at replaced storage without a build
                         (0 for an engine without the notion) */
} kvweld_engine_counters;

/* Paged KV: the pool's shape and identity (KVWELD_CAP_BLOCKS). */
typedef struct kvweld_pool_info {
    int32_t block_size;    /* positions per block */
    int32_t n_blocks;      /* blocks in the pool */
    int32_t free_blocks;   /* blocks no table holds */
    uint64_t storage;      /* serial of the pool's storage: new when it is replaced (grow) */
    uint64_t plan_storage; /* serial of the storage the held plan reads and writes; 0 without a plan */
} kvweld_pool_info;

#define KVWELD_POOL_COMPACT 0 /* move blocks in use to the lowest numbers, in place */
#define KVWELD_POOL_GROW 1    /* replace the pool's storage with a larger one */
#define KVWELD_POOL_RESET 2   /* version 4: empty every open sequence and replace the pool's
                                 storage (same block count, every block free) */

/* Version 11: a sampler chain (llama.cpp: llama_sampler_chain_init with
 * greedy, or top_k then dist). */
typedef struct kvweld_sampler {
    int32_t top_k; /* 0: greedy (the largest logit); 1..64: the top_k largest, then a draw weighed by their softmax */
    uint32_t seed; /* the draw's seed (top_k > 0) */
} kvweld_sampler;

/* Version 14: a reuse rule the plugin ships (rule_create and the rest,
 * below): the accounting oracle's expectation for each decode call, from
 * the calls the harness made. One memory call as the rule hears it: `kind`
 * names it, the other fields are the ones its kind uses (the rest 0). */
#define KVWELD_CALL_OPEN 0         /* seq */
#define KVWELD_CALL_CLOSE 1        /* seq */
#define KVWELD_CALL_TRUNCATE 2     /* seq, a = the new length, b = 1 for a step's rejected drafts */
#define KVWELD_CALL_CLEAR 3        /* seq */
#define KVWELD_CALL_COPY 4         /* seq = source, a = destination, b = 1 when it was opened for the copy */
#define KVWELD_CALL_CLEAR_ALL 5
#define KVWELD_CALL_RELOAD 6
#define KVWELD_CALL_SWAP_LAYER 7   /* seq, a = layer */
#define KVWELD_CALL_POOL_OP 8      /* a = KVWELD_POOL_* */
#define KVWELD_CALL_ADAPTERS 9     /* LoRA set, control vector or warmup: before and after (adapter set ids) */
#define KVWELD_CALL_SHIFT 10       /* seq, a = p0, b = p1, c = the length before */
#define KVWELD_CALL_SAVE 11        /* seq, a = state id */
#define KVWELD_CALL_LOAD 12        /* seq, a = length, b = state id */
#define KVWELD_CALL_LOAD_REFUSED 13 /* seq */
#define KVWELD_CALL_LIVE 14        /* key, value */
#define KVWELD_CALL_SAMPLER 15     /* seq, a = 1 set (0 cleared), b = 1 in place */
#define KVWELD_CALL_KEEP 16        /* seq; list, n_list = the other sequences that held positions */

typedef struct kvweld_call {
    int32_t kind;
    int32_t seq, a, b, c;
    uint64_t before, after; /* KVWELD_CALL_ADAPTERS */
    const char* key;        /* KVWELD_CALL_LIVE */
    const char* value;
    const int32_t* list;    /* KVWELD_CALL_KEEP */
    int32_t n_list;
} kvweld_call;

/* What one decode call may do: it runs `plans` plans, of which at least
 * must_reuse and at most must_reuse + may_reuse reuse the plan before
 * them; builds and rebinds exact where not -1. */
typedef struct kvweld_expectation {
    int32_t plans, must_reuse, may_reuse, builds, rebinds;
} kvweld_expectation;

typedef struct kvweld_rule kvweld_rule; /* the plugin's rule state */

/* Version 15: the engine's settings described once, as data, one entry
 * each, in place of three lists of text: the keys options.params may name
 * (PARAM), the live settings set_live takes (LIVE, in place of
 * api.live_settings) and the fault switches options.faults may turn on
 * (FAULT, in place of api.fault_names). A table with settings leaves
 * fault_names and live_settings NULL. The host checks options.params
 * against the PARAM entries before create, naming the setting and the
 * values it takes: a plugin is given only keys it declared, each once,
 * with a value among its values where it lists some. */
#define KVWELD_SETTING_PARAM 0
#define KVWELD_SETTING_LIVE 1
#define KVWELD_SETTING_FAULT 2
typedef struct kvweld_setting {
    int32_t kind;              /* KVWELD_SETTING_* */
    const char* name;          /* unique within its kind; no ',', '=', ':' or '|' */
    /* NULL-terminated, or NULL. PARAM: the values it takes (NULL: any, the
     * plugin checks them); LIVE: the values a swarm may draw (at least
     * one); FAULT: the failure classes it may show as (stale_decode,
     * spurious_invalidation, missed_invalidation, engine_error). */
    const char* const* values;
    const char* doc;           /* one line for the user, or NULL */
} kvweld_setting;

typedef struct kvweld_engine_api {
    uint32_t abi_version;     /* KVWELD_ENGINE_ABI_VERSION the plugin was built with */
    const char* name;         /* e.g. "llamacpp" */
    const char* model_format; /* "llama2c" or "gguf" */
    uint32_t capabilities;    /* KVWELD_CAP_* */
    /* The fault switches options.faults may name, comma-separated; "" when
     * the engine has none. `kvweld mutants --engine` runs each of them.
     * Version 4: each name may carry the classes a failure it causes may
     * legitimately show as, "name:class|class", among stale_decode,
     * spurious_invalidation, missed_invalidation and engine_error; the
     * kill matrix then requires every failing seed to be in one of them. */
    const char* fault_names;

    int (*create)(const kvweld_engine_options* options, kvweld_engine** out, char* err, size_t err_len);
    void (*destroy)(kvweld_engine* engine);
    int32_t (*vocab)(const kvweld_engine* engine);

    /* Sequences: an open sequence is empty; close frees it. */
    int (*open_seq)(kvweld_engine* engine, int32_t seq, char* err, size_t err_len);
    int (*close_seq)(kvweld_engine* engine, int32_t seq, char* err, size_t err_len);
    /* n pairs; sequence seqs[i] gets tokens[i] at its next position;
     * logits[i * vocab .. (i + 1) * vocab) receives that pair's logits.
     * A pair on a sequence that is not open, a token outside 0..vocab-1 or
     * a sequence past its n_ctx positions fails the whole call, naming the
     * value, before any pair is decoded. */
    int (*decode)(kvweld_engine* engine, const int32_t* seqs, const int32_t* tokens, int32_t n, float* logits,
                  char* err, size_t err_len);
    /* Keeps the first n positions; n past the length fails, naming it. */
    int (*truncate)(kvweld_engine* engine, int32_t seq, int32_t n, char* err, size_t err_len);
    int (*clear_seq)(kvweld_engine* engine, int32_t seq, char* err, size_t err_len);
    int (*clear_all)(kvweld_engine* engine, char* err, size_t err_len);
    /* Optional (NULL unless the capability is declared). copy_seq: dst (open,
     * empty or not) gets src's positions; src == dst fails. */
    int (*copy_seq)(kvweld_engine* engine, int32_t src, int32_t dst, char* err, size_t err_len);
    int (*counters)(const kvweld_engine* engine, kvweld_engine_counters* out, char* err, size_t err_len);
    /* Replace the model with the one in model_path (same format and shape),
     * as a server reloads weights. Every open sequence stays open and is
     * emptied (as by clear_seq); counters keep counting. */
    int (*reload)(kvweld_engine* engine, const char* model_path, char* err, size_t err_len);
    /* Storage identity, one serial per layer into out[0..n_layers): numbers
     * the engine never gives to other storage while the process lives (0:
     * none). which = KVWELD_STORAGE_HELD: the storage the sequence's KV is
     * in; KVWELD_STORAGE_PLAN: the storage its held plan reads and writes
     * (all 0 without a plan). n_layers must be the model's layer count. */
    int (*storage)(const kvweld_engine* engine, int32_t seq, int32_t which, uint64_t* out, int32_t n_layers,
                   char* err, size_t err_len);
    /* One position's K and V in one layer of a sequence, kv_dim floats each
     * (n_kv_heads * head_dim), as the engine's plans will read them. */
    int (*read_kv)(const kvweld_engine* engine, int32_t seq, int32_t layer, int32_t pos, float* k, float* v,
                   int32_t kv_dim, char* err, size_t err_len);
    /* Offload and restore: layer `layer` of the sequence's KV moves to new
     * storage holding the same content (so its serial changes). */
    int (*swap_layer)(kvweld_engine* engine, int32_t seq, int32_t layer, char* err, size_t err_len);
    /* Version 3. Paged KV (KVWELD_CAP_BLOCKS): the pool, a sequence's block
     * table (the blocks holding its positions, in order, into out[0..cap);
     * *n gets the count, which may exceed cap), and a block's reference
     * count (0: free). */
    int (*pool_info)(const kvweld_engine* engine, kvweld_pool_info* out, char* err, size_t err_len);
    int (*block_table)(const kvweld_engine* engine, int32_t seq, int32_t* out, int32_t cap, int32_t* n, char* err,
                       size_t err_len);
    int (*block_refcount)(const kvweld_engine* engine, int32_t block, int32_t* out, char* err, size_t err_len);
    /* KVWELD_CAP_POOL_OPS: op = KVWELD_POOL_COMPACT, KVWELD_POOL_GROW or
     * (version 4) KVWELD_POOL_RESET; another op fails, naming it. */
    int (*pool_op)(kvweld_engine* engine, int32_t op, char* err, size_t err_len);
    /* Version 4, KVWELD_CAP_PLAN_SERIAL: the identity of the plan that
     * decodes sequence `seq`, a serial minted per build (a rebind or a kept
     * plan keeps it) and never given twice while the process lives; 0
     * before its first decode. Sequences may share a plan. The harness
     * checks it against the counters: each serial first seen after a call
     * needs a build counted in that call, and a call that counts builds
     * must show a new serial, so a counter that hides a build is caught. */
    int (*plan_serial)(const kvweld_engine* engine, int32_t seq, uint64_t* out, char* err, size_t err_len);
    /* Version 5, KVWELD_CAP_LORA: the LoRA adapters every later decode runs
     * with, n files the harness wrote (whatever api.model_format: a GGUF
     * with general.type "adapter", adapter.type "lora", adapter.lora.alpha
     * and per adapted matrix "<tensor>.lora_a" [r][n_in] and ".lora_b"
     * [n_out][r], llama.cpp's adapter file; since version 6 kvweld writes
     * no other kind), each with its scale: W x + scale * alpha / r * B (A x). n = 0: none.
     * The same set at the same scales again changes nothing. A file of
     * another model's shape fails, naming it, and changes nothing. The
     * adapters and the control vector survive a reload. */
    int (*set_loras)(kvweld_engine* engine, const char* const* paths, const float* scales, int32_t n, char* err,
                     size_t err_len);
    /* KVWELD_CAP_CVEC: the control vector every later decode adds to the
     * residual stream after each layer in [il_start, il_end] (inclusive):
     * llama.cpp's layout, n_embd floats per layer starting at layer 1, len
     * floats in all; data = NULL clears it. A bad n_embd, len or range
     * fails, naming it, and changes nothing. */
    int (*set_cvec)(kvweld_engine* engine, const float* data, size_t len, int32_t n_embd, int32_t il_start,
                    int32_t il_end, char* err, size_t err_len);
    /* KVWELD_CAP_OUTPUTS: decode, with outputs[i] != 0 for the pairs whose
     * logits are wanted (a prefill chunk wants its last row only); logits
     * receives one row per such pair, in order. Every pair's KV is written
     * as in decode. Refusals as decode's. */
    int (*decode_outputs)(kvweld_engine* engine, const int32_t* seqs, const int32_t* tokens, const uint8_t* outputs,
                          int32_t n, float* logits, char* err, size_t err_len);
    /* Version 6, KVWELD_CAP_WARMUP: llama.cpp's warmup mode (llama_set_warmup)
     * for every later decode: an MoE layer's router weighs the experts it
     * sums by the softmax over all n_expert logits, not over the chosen
     * n_expert_used (llama.cpp 0.3.36 runs every expert and sums the
     * n_expert_used largest). No effect on a dense model. Survives a reload. */
    int (*set_warmup)(kvweld_engine* engine, int32_t on, char* err, size_t err_len);
    /* Version 6, the differential twin (both optional). no_reuse_param: the
     * setting ("key=value" for options.params) that makes the engine build
     * a fresh plan for every call; the harness runs a second instance with
     * it in lockstep and compares every row (NULL: no twin). twin_tolerance:
     * how far this engine's rows may lie from that twin's in its present
     * state, in kvweld's logit error (max |a - b| / max(1, max |b|)), with
     * *why set to a static string naming the cause; 0, or the function
     * NULL, means bit for bit. */
    const char* no_reuse_param;
    double (*twin_tolerance)(const kvweld_engine* engine, const char** why);
    /* Version 7, KVWELD_CAP_SHIFT, a context shift (llama.cpp's seq_rm then
     * seq_add with a negative delta): positions [p0, p1) of the sequence
     * are removed and the later ones move down by p1 - p0, their keys
     * re-rotated for their new positions; the next token goes at length -
     * (p1 - p0). 0 <= p0 <= p1 <= length, else it fails naming the bound and
     * changes nothing. (Position division, llama.cpp's seq_div for
     * self-extend, has no capability yet: kvweld's reference shadow holds a
     * row per position, so no oracle could judge it.) */
    int (*shift)(kvweld_engine* engine, int32_t seq, int32_t p0, int32_t p1, char* err, size_t err_len);
    /* KVWELD_CAP_STATE: a sequence's state (its KV rows and length, naming
     * the model it came from) in the engine's own format. state_save with
     * out = NULL sets *n to the size; with out, writes at most cap bytes
     * and sets *n to the size (a cap below it fails). state_load replaces
     * what an open sequence holds with the state's positions; a state of
     * another model or shape, or bytes that are not a whole state, fail
     * naming why, and the sequence keeps what it held. */
    int (*state_save)(kvweld_engine* engine, int32_t seq, uint8_t* out, size_t cap, size_t* n, char* err,
                      size_t err_len);
    int (*state_load)(kvweld_engine* engine, int32_t seq, const uint8_t* data, size_t n, char* err, size_t err_len);
    /* Version 8: which build of the engine this is, as free text naming its
     * release and source (llama.cpp's plugin: "llama-cpp-python 0.3.36,
     * llama.cpp 0c1e57098bba"); NULL or "" when it has no name. Every
     * report, trace and JSON names it, and `kvweld diff` and `versions`
     * tell two builds apart by it. */
    const char* build;
    /* Version 9, live settings: what a server changes between decodes
     * without a new context (llama.cpp's llama_set_n_threads,
     * llama_set_embeddings, llama_set_causal_attn), each with the values a
     * swarm may draw: "n_threads:1|2,causal_attn:0|1" (NULL or "": none).
     * set_live applies one to every later decode; a key not listed or a
     * value the engine cannot take fails naming it and changes nothing.
     * Whether a held plan survives the change is the engine's reuse rule's
     * question; the rows must be what the reference computes either way. */
    const char* live_settings;
    int (*set_live)(kvweld_engine* engine, const char* key, const char* value, char* err, size_t err_len);
    /* Version 10, KVWELD_CAP_EMBEDDINGS (the engine lists the live setting
     * "embeddings:0|1"): with embeddings on, the hidden state after the
     * final norm of output row `row` of the last decode call (the rows
     * ordered as its logits), n_embd floats (the model's dim): llama.cpp's
     * llama_get_embeddings_ith with pooling none. Embeddings off, a row
     * past the last call's outputs or another n_embd fails naming it. */
    int (*read_embeddings)(const kvweld_engine* engine, int32_t row, float* out, int32_t n_embd, char* err,
                           size_t err_len);
    /* Version 11, KVWELD_CAP_SAMPLERS: backend samplers per sequence
     * (llama.cpp's llama_set_sampler). set_sampler gives sequence `seq`
     * (0..n_seq_max-1, open or not: a chain belongs to the sequence id)
     * the chain `s` for every later decode, with a fresh draw state seeded
     * by s->seed; s = NULL clears it (none held: nothing changes). in_place
     * != 0: the chain the sequence holds is changed where it is, the same
     * object refilled (as a server reconfigures a slot's chain; llama.cpp
     * takes a chain once, so it is not given again), instead of replaced
     * by a new one; with none held it fails. Chains survive a reload, their
     * draws restarted from their seeds. A top_k outside
     * 0..min(64, vocab) fails naming it and changes nothing. Each output
     * row of a sequence with a chain is sampled in the decode: one draw per
     * such row, rows in call order, every draw kept (the harness accepts
     * every sampled token). Such a row's logits may be left unfilled (an
     * engine that samples on its device need not copy them back: llama.cpp
     * does not when every output row of a ubatch is sampled); the harness
     * judges its sampled token instead. sampled: the token sampled for
     * output row `row` of the last decode call (rows as its logits), -1
     * where the row's sequence had no chain; a row past the last call's
     * outputs fails naming it. */
    int (*set_sampler)(kvweld_engine* engine, int32_t seq, const kvweld_sampler* s, int32_t in_place, char* err,
                       size_t err_len);
    int (*sampled)(const kvweld_engine* engine, int32_t row, int32_t* token, char* err, size_t err_len);
    /* Version 12, KVWELD_CAP_ABORT: an abort callback (llama.cpp's
     * llama_set_abort_callback) armed for the next decode call only: the
     * engine asks it whether to stop at points of its own choosing (llama.cpp:
     * after each graph node; kvweld: before each token), and it answers yes
     * from its `after`-th question of that call on (counted from 0); after <
     * 0 disarms it. A call it stops returns KVWELD_ABORTED (an error message
     * written): as llama.h documents for llama_decode, the pairs of the
     * ubatches finished before it stay in the memory, each sequence keeping a
     * prefix of its pairs in the call, the rest are not written, and no row
     * is returned. A call it never stops is an ordinary call. seq_length:
     * the positions sequence `seq` holds, read from the engine's memory
     * (llama.cpp: llama_memory_seq_pos_max + 1), so a caller learns what an
     * aborted call kept. */
    int (*set_abort)(kvweld_engine* engine, int32_t after, char* err, size_t err_len);
    int (*seq_length)(const kvweld_engine* engine, int32_t seq, int32_t* n, char* err, size_t err_len);
    /* Version 13 (from 16 on, takes_live): the live settings this engine takes as it was made, in
     * live_settings' format and a part of that list (its settings may rule
     * one out: llama.cpp asserts that a call with causal attention off fits
     * one ubatch, so a context whose n_ubatch is below its n_batch cannot
     * take causal_attn:0). NULL, or a NULL result: all of live_settings.
     * The string stays valid while the engine lives. */
    const char* (*live_settings_of)(const kvweld_engine* engine);
    /* Version 14: sizeof(kvweld_engine_api) as the plugin was built. From
     * version 14 on a host reads a table by its size, not its version: a
     * field past struct_size is taken as NULL (absent), and a table newer
     * than the host loads with the fields the host knows. Every later field
     * goes after this one. */
    size_t struct_size;
    /* Version 14, KVWELD_CAP_KEEP (llama.cpp's llama_memory_seq_keep): every
     * sequence but `seq` is emptied (stays open, holds no position); `seq`
     * keeps what it holds. A seq outside 0..n_seq_max-1 or not open fails
     * naming it and changes nothing. */
    int (*keep_seq)(kvweld_engine* engine, int32_t seq, char* err, size_t err_len);
    /* Version 14, the reuse rule the plugin ships (all four, or none): how
     * many plans each decode call may reuse, for an engine kvweld has no
     * rule of its own for, so that an engine built elsewhere gets both
     * halves of the accounting oracle (a reuse it must make and did not is
     * a spurious invalidation; one it may not make, a missed one). It sees
     * what the harness did, never the engine: rule_create with the options
     * the engine was made with; rule_on_call for every memory call the
     * engine accepted, in order; rule_on_decode for every decode call
     * (seqs per token, outputs as decode_outputs' or NULL for every row),
     * filling *out; rule_why: the clauses that decided the last call, for
     * a failure's message (a NUL-terminated string of at most len bytes). */
    int (*rule_create)(const kvweld_engine_options* options, kvweld_rule** out, char* err, size_t err_len);
    void (*rule_destroy)(kvweld_rule* rule);
    int (*rule_on_call)(kvweld_rule* rule, const kvweld_call* call, char* err, size_t err_len);
    int (*rule_on_decode)(kvweld_rule* rule, const int32_t* seqs, const uint8_t* outputs, int32_t n,
                          kvweld_expectation* out, char* err, size_t err_len);
    void (*rule_why)(const kvweld_rule* rule, char* out, size_t len);
    /* Version 15: n_settings entries (see kvweld_setting); NULL: the text
     * lists fault_names and live_settings, as before. */
    const kvweld_setting* settings;
    int32_t n_settings;
    /* Version 16: create, taking its settings as data (options.given, the
     * text fields NULL). A plugin fills create_v16 or create; one that
     * fills create_v16 leaves create NULL, so that a host before 16, which
     * gives no options.given, refuses its table (naming create) instead of
     * making an engine without its settings. */
    int (*create_v16)(const kvweld_engine_options* options, kvweld_engine** out, char* err, size_t err_len);
    /* Version 16, in place of live_settings_of's text: whether this engine,
     * as it was made, takes live setting `key` (a LIVE entry of
     * api.settings) at `value` (one of that entry's values): 1 yes, 0 no
     * (llama.cpp asserts that a call with causal attention off fits one
     * ubatch, so a context whose n_ubatch is below its n_batch takes no
     * causal_attn 0). NULL: every value of every live setting. */
    int32_t (*takes_live)(const kvweld_engine* engine, const char* key, const char* value);
} kvweld_engine_api;

#define KVWELD_STORAGE_HELD 0
#define KVWELD_STORAGE_PLAN 1

/* The one symbol a plugin exports. */
typedef const kvweld_engine_api* (*kvweld_engine_entry_fn)(void);
#define KVWELD_ENGINE_ENTRY "kvweld_engine_entry"

#ifdef __cplusplus
}
#endif

#endif /* KVWELD_ENGINE_ABI_H */
