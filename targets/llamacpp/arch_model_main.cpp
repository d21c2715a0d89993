// kvweld-arch-model: writes a GGUF model of another architecture than
// llama for llama-server, which loads models from files only. The model is
// the one the plugin's arch=NAME makes (llama_arch_models.hpp): the shape
// of a kvweld llama file, weights from a seed; llama.cpp's own saver
// (llama_model_save_to_file) writes it, with the dummy "test" vocabulary
// a server detokenizes with.
//   kvweld-arch-model ARCH WINDOW SEED IN OUT
// Exit 0 written, 2 bad arguments or a model llama.cpp refuses (named on
// stderr).
#include "targets/llamacpp/llama_arch_models.hpp"

#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

int fail(const std::string& why) {
    std::fprintf(stderr, "kvweld-arch-model: %s\n", why.c_str());
    return 2;
}

// A whole decimal number in [lo, hi], or -1.
long long number_in(const char* text, long long lo, long long hi) {
    char* end = nullptr;
    const long long v = std::strtoll(text, &end, 10);
    return end != text && *end == '\0' && v >= lo && v <= hi ? v : -1;
}

}  // namespace

int main(int argc, char** argv) {
    using namespace kvweld::llamacpp;
    if (argc != 6) return fail("usage: kvweld-arch-model ARCH WINDOW SEED IN OUT");
    const ArchModel* arch = find_arch(argv[1]);
    if (!arch) return fail(std::string("arch '") + argv[1] + "': not one of kvweld's (llama_arch_list.hpp)");
    const long long window = number_in(argv[2], 1, 4096), seed = number_in(argv[3], 0, 0xffffffffLL);
    if (window < 0) return fail(std::string("window '") + argv[2] + "': must be 1..4096");
    if (seed < 0) return fail(std::string("seed '") + argv[3] + "': must be 0..4294967295");
    if constexpr (!kHasInitFromUser) return fail("this llama.cpp has no llama_model_init_from_user");
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model* file = llama_model_load_from_file(argv[4], mp);
    if (!file) return fail(std::string("llama.cpp cannot load ") + argv[4]);
    ArchShape shape = arch_shape_of(file, std::uint32_t(window));
    shape.test_vocab = true;
    llama_model_free(file);
    llama_model* model = arch_model(*arch, std::uint32_t(seed), shape);
    if (!model) return fail(std::string("llama.cpp made no ") + arch->name + " model of this shape (its log above says why)");
    llama_model_save_to_file(model, argv[5]);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
