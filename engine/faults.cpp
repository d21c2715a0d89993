#include "engine/faults.hpp"

#include "util/cat.hpp"
#include "util/enum_names.hpp"
#include "util/error.hpp"

#include <array>

namespace kvweld {

namespace {

using D = Detection;
// A fault that ignores the model's identity is a stale decode when the
// weights changed and a missed invalidation when they did not.
constexpr Detections kStaleOrMissed{D::stale_decode, D::missed_invalidation};
constexpr std::array kFaults = {
    FaultInfo{Fault::geometry_only_key, "geometry_only_key", kStaleOrMissed,
              "key omits model and allocation ids", FaultDesign::both},
    FaultInfo{Fault::no_remint_on_clear, "no_remint_on_clear", {D::stale_decode},
              "clear() keeps the allocation id"},
    FaultInfo{Fault::no_remint_on_set_layer, "no_remint_on_set_layer", {D::stale_decode},
              "set_layer() keeps the allocation id"},
    FaultInfo{Fault::remint_on_truncate, "remint_on_truncate", {D::spurious_invalidation},
              "truncate_to() mints a new allocation id"},
    FaultInfo{Fault::model_id_not_in_key, "model_id_not_in_key", kStaleOrMissed,
              "model instance left out of the key", FaultDesign::both},
    FaultInfo{Fault::weight_pointer_key, "weight_pointer_key", kStaleOrMissed,
              "model keyed by its weight buffer's address (addresses recycled)", FaultDesign::both},
    FaultInfo{Fault::partial_rebind, "partial_rebind", {D::stale_decode},
              "rebind moves only some layers"},
    FaultInfo{Fault::offset_not_rebound, "offset_not_rebound", {D::stale_decode},
              "KV write offset kept from the build", FaultDesign::both},
    FaultInfo{Fault::mask_not_rebound, "mask_not_rebound", {D::stale_decode},
              "attention length kept from the build", FaultDesign::both},
    // The kept row is one the scheduler does not count: the next decode
    // lands a position late (stale), or a sequence near its capacity is
    // refused as full one token early (an engine error, naming the capacity).
    FaultInfo{Fault::spec_reject_off_by_one, "spec_reject_off_by_one", {D::stale_decode, D::engine_error},
              "speculative reject truncates to base+m+1", FaultDesign::dense, true},
    FaultInfo{Fault::always_stale, "always_stale", {D::spurious_invalidation},
              "every check says Stale", FaultDesign::both},
    FaultInfo{Fault::position_in_key, "position_in_key", {D::spurious_invalidation},
              "per-token position in the key", FaultDesign::both},
    // Different weights give a different digest (a correct rebuild); the
    // same weights keep the plan, which is then exactly right: only the
    // accounting oracle can see it, as a missed invalidation.
    FaultInfo{Fault::model_key_by_content, "model_key_by_content", {D::missed_invalidation},
              "model identity by a digest of its weights (a same-weights reload keeps the plan)", FaultDesign::both},
    FaultInfo{Fault::build_counted_as_kept, "build_counted_as_kept", {D::engine_error},
              "the session counts a rebuild as a kept plan (a reuse counter that lies)"},
    // A prefix cache keyed by position, not by token: after a rewind the
    // rows fed again are taken as still written. Fed the same tokens they
    // are, so only a re-feed of other tokens (or poisoned rows) shows it.
    FaultInfo{Fault::refeed_write_skipped, "refeed_write_skipped", {D::stale_decode},
              "a position below the plan's high-water mark skips its KV write (rows fed again are taken as written)"},
    FaultInfo{Fault::stale_block_table, "stale_block_table", {D::stale_decode},
              "the paged plan keeps the block table it first ran with (not rebound per step)", FaultDesign::paged},
    FaultInfo{Fault::freed_block_in_table, "freed_block_in_table", {D::stale_decode},
              "truncate frees a sequence's blocks past its length but leaves them in its table", FaultDesign::paged},
    FaultInfo{Fault::cow_skipped, "cow_skipped", {D::stale_decode},
              "copy on write skipped: a shared prefix block is written in place", FaultDesign::paged},
    FaultInfo{Fault::grow_keeps_id, "grow_keeps_id", kStaleOrMissed,
              "a pool grow or reset replaces the storage but keeps the pool's id", FaultDesign::paged},
    FaultInfo{Fault::compact_skips_table, "compact_skips_table", {D::stale_decode},
              "compaction moves a block without re-pointing one table that holds it", FaultDesign::paged},
    FaultInfo{Fault::refcount_off_by_one, "refcount_off_by_one", {D::stale_decode},
              "fork takes no reference on the sequence's last block", FaultDesign::paged},
    // A set whose adapters all have scale 0 contributes nothing, so a plan
    // that kept the old set's ops is then exactly right: a missed invalidation.
    FaultInfo{Fault::adapter_set_not_in_key, "adapter_set_not_in_key", kStaleOrMissed,
              "the LoRA adapter set is left out of the key: a new set keeps the plan and its old adapters",
              FaultDesign::dense, false, true},
    FaultInfo{Fault::lora_scale_baked, "lora_scale_baked", {D::stale_decode},
              "the plan bakes the LoRA scales it was built with (not keyed, not step data)", FaultDesign::dense, false, true},
    FaultInfo{Fault::lora_scale_in_key, "lora_scale_in_key", {D::spurious_invalidation},
              "LoRA scales in the key: a scale change rebuilds (llama.cpp PR 20166's class)", FaultDesign::dense, false, true},
    FaultInfo{Fault::cvec_baked, "cvec_baked", {D::stale_decode},
              "the plan bakes the control vector it was built with (not keyed, not step data)", FaultDesign::dense,
              false, true},
    FaultInfo{Fault::cvec_in_key, "cvec_in_key", {D::spurious_invalidation},
              "the control vector in the key: a set, change, re-range or clear rebuilds", FaultDesign::dense, false, true},
    FaultInfo{Fault::warmup_baked, "warmup_baked", {D::stale_decode},
              "an MoE plan keeps the warmup routing it was built with (not keyed, not step data)", FaultDesign::dense,
              false, true},
    FaultInfo{Fault::warmup_in_key, "warmup_in_key", {D::spurious_invalidation},
              "warmup in the key: switching it rebuilds an MoE plan", FaultDesign::dense, false, true},
    FaultInfo{Fault::shift_rotation_skipped, "shift_rotation_skipped", {D::stale_decode},
              "a context shift moves the key rows down but leaves them rotated for their old positions"},
    FaultInfo{Fault::shift_delta_overwritten, "shift_delta_overwritten", {D::stale_decode},
              "a second shift before the next decode overwrites the rotation a row owes instead of adding to it "
              "(llama.cpp issue 3825's K-shift)"},
    FaultInfo{Fault::shift_remints_id, "shift_remints_id", {D::spurious_invalidation},
              "a context shift mints a new allocation id, so the held plan is rebound though its storage is the same"},
    FaultInfo{Fault::threads_in_key, "threads_in_key", {D::spurious_invalidation},
              "a thread-count change (live setting n_threads) drops the held plan: the next decode builds one",
              FaultDesign::both, false, true},
    FaultInfo{Fault::embeddings_baked, "embeddings_baked", {D::stale_decode},
              "the plan hands back the embeddings of the first step they were read for (an output buffer bound "
              "at build and never rewritten)",
              FaultDesign::dense, false, true},
    FaultInfo{Fault::sampler_baked, "sampler_baked", {D::stale_decode},
              "the plan samples with the chain its sequence had when it was built (a sampler set, changed or "
              "cleared later is not seen until the next build)",
              FaultDesign::dense, false, true},
    // The length read back after the abort says one more than was written:
    // the K/V read back at that position is wrong (judged before the
    // accounting). Behind the plugin no dead row is poisoned: where the
    // row a rewind left there is the right one, only the accounting sees
    // it, the claimed token's plan use missing (spurious).
    FaultInfo{Fault::abort_keeps_stopped, "abort_keeps_stopped", {D::stale_decode, D::spurious_invalidation},
              "a decode the abort callback stopped counts the token it stopped at as held, its K/V never written",
              FaultDesign::dense, false, true},
    FaultInfo{Fault::causal_baked, "causal_baked", {D::stale_decode},
              "the plan keeps the attention mode of its first run (live setting causal_attn): after a switch, a "
              "held plan attends as before until the next build",
              FaultDesign::dense, false, true},
};

// The verdict names (sim/verdict.cpp) of the same classes.
constexpr NameTable<Detection, 4> kDetections{{
    {Detection::stale_decode, "stale_decode"},
    {Detection::spurious_invalidation, "spurious_invalidation"},
    {Detection::missed_invalidation, "missed_invalidation"},
    {Detection::engine_error, "engine_error"},
}};

// Initial-exec: the engine is also linked into plugins that kvweld loads
// with dlopen, and a dynamic TLS block there is what LeakSanitizer's
// thread scan misreads at exit (it crashed with "Tracer caught signal 11"
// after a paged replay under ASan); one byte of static TLS avoids it.
[[gnu::tls_model("initial-exec")]] thread_local FaultSet tl_faults;

}  // namespace

FaultSet& detail::thread_faults() { return tl_faults; }

std::span<const FaultInfo> all_faults() { return kFaults; }

std::optional<Fault> fault_from_name(std::string_view name) {
    for (const FaultInfo& f : kFaults)
        if (f.name == name) return f.fault;
    return std::nullopt;
}

Fault require_fault(std::string_view name, FaultDesign design) {
    for (const FaultInfo& f : kFaults) {
        if (f.name != name) continue;
        require(f.design == FaultDesign::both || f.design == design, "fault '", name, "' lives in the ",
                f.design == FaultDesign::paged ? "paged KV design: run it with --engine kvweld-paged --fault "
                                               : "dense KV design: run it with --engine inproc (the default) or "
                                                 "kvweld, --fault ",
                name);
        return f.fault;
    }
    throw Error(cat("unknown fault '", name, "': known faults are ", fault_names()));
}

std::string_view to_string(Fault f) {
    for (const FaultInfo& info : kFaults)
        if (info.fault == f) return info.name;
    return "?";
}

std::string_view to_string(Detection d) { return name_in(kDetections, d); }

std::string Detections::describe() const {
    std::string out;
    for (const EnumName<Detection>& d : kDetections)
        if (has(d.value)) out += cat(out.empty() ? "" : "|", d.name);
    return out;
}

Detections Detections::parse(std::string_view text) {
    Detections out;
    for (std::string_view rest = text;;) {
        const auto bar = rest.find('|');
        out.add(parse_in(kDetections, rest.substr(0, bar), cat("failure class (in '", text, "')")));
        if (bar == std::string_view::npos) return out;
        rest = rest.substr(bar + 1);
    }
}

std::span<const Detection> all_detections() {
    static constexpr std::array kAll = {Detection::stale_decode, Detection::spurious_invalidation,
                                        Detection::missed_invalidation, Detection::engine_error};
    return kAll;
}

std::string fault_names() {
    std::string out;
    for (const FaultInfo& f : kFaults) {
        if (!out.empty()) out += ", ";
        out += f.name;
    }
    return out;
}

std::string FaultSet::describe() const {
    std::string out;
    for (const FaultInfo& f : kFaults) {
        if (!has(f.fault)) continue;
        if (!out.empty()) out += "+";
        out += f.name;
    }
    return out.empty() ? "none" : out;
}

ScopedFaults::ScopedFaults(FaultSet faults) : saved_(tl_faults) {
    require(kFaultsCompiled || faults.empty(),
            "fault switches requested, but this build has no KVWELD_FAULTS (use a test build)");
    tl_faults = faults;
}

ScopedFaults::~ScopedFaults() { tl_faults = saved_; }

}  // namespace kvweld
