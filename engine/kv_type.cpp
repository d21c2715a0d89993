#include "engine/kv_type.hpp"

#include "util/enum_names.hpp"

namespace kvweld {
namespace {

constexpr NameTable<KvType, 3> kKvTypes = {{{KvType::f32, "f32"}, {KvType::f16, "f16"}, {KvType::bf16, "bf16"}}};

}  // namespace

std::string_view kv_type_name(KvType type) { return name_in(kKvTypes, type); }

KvType parse_kv_type(std::string_view text, std::string_view what) { return parse_in(kKvTypes, text, what); }

double kv_tolerance(KvType type) {
    switch (type) {
        case KvType::f32: return kLogprobTolerance;
        // 300 seeds of 80 llama-server ops on b11434+fixes, the reference
        // rounding as ggml does: f16 rows came within 1.6e-3 of it (chunks
        // shifted under LoRA), bf16 within 4.0e-3 (it aborts on any shift:
        // finding bf16-kshift-abort); a stale row moves a logprob by 1e-2
        // and more. Without the rounding, f16 came within 1.1e-3 of F32
        // KV's answers on fresh prompts, bf16 6.7e-3.
        case KvType::f16: return 5e-3;
        case KvType::bf16: return 2e-2;
    }
    return kLogprobTolerance;
}

std::string kv_tolerances() {
    std::string out;
    for (const EnumName<KvType>& t : kKvTypes) out += cat(out.empty() ? "" : ", ", kv_tolerance(t.value), " with ", t.name, " KV");
    return out;
}

}  // namespace kvweld
