// `kvweld convert`: a llama2.c checkpoint (or a seeded random model) to a
// GGUF file that llama.cpp loads, over the very same weights; or a seeded
// random model to a llama2.c checkpoint (an output ending in .bin), for
// run.c and other llama2.c-format engines.
#include "cli/commands.hpp"

#include "engine/checkpoint.hpp"
#include "engine/gguf.hpp"
#include "sim/server/server_exchange.hpp"
#include "sim/server/server_settings.hpp"
#include "sim/server/server_sim.hpp"

#include <fstream>

#include <cstdio>

namespace kvweld::cli {

namespace {

struct ConvertArgs {
    std::string input, output;
    std::string config;
    std::uint64_t seed = 1;
    std::string vocab = "none";
    int lora = -1;  // --lora I: the server simulator's I-th adapter of the model instead
    std::string arch = "llama";  // another architecture of the same shape (kvweld-arch-model)
    int window = 8;
};

int run_convert(const ConvertArgs& a) {
    require(!a.output.empty(), "convert: no output file given");
    require(a.input.empty() != a.config.empty(), "convert: give either a checkpoint or --config (a random model)");
    require(a.vocab == "none" || !a.output.ends_with(".bin"), "convert: --vocab ", a.vocab,
            ": a llama2.c checkpoint carries no vocabulary (give a .gguf OUTPUT)");
    if (a.lora >= 0) {
        require(!a.config.empty() && !a.output.ends_with(".bin"), "convert: --lora needs --config and a .gguf OUTPUT");
        const ModelConfig config = config_by_name(a.config);
        const auto loras = sim::server::server_loras(config, a.seed, a.lora + 1);
        const std::vector<std::byte> bytes = serialize_gguf_lora(*loras.back());
        std::ofstream out(a.output, std::ios::binary);
        require(out.good(), "convert: cannot write ", a.output);
        out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
        std::printf("convert: LoRA adapter %d of random %s seed %llu (the server simulator's) -> %s (rank %d)\n", a.lora,
                    a.config.c_str(), (unsigned long long)a.seed, a.output.c_str(), loras.back()->rank());
        return 0;
    }
    const Model model = a.config.empty() ? load_llama2c(a.input) : Model::random(config_by_name(a.config), a.seed);
    if (a.arch != "llama") {
        require(!a.config.empty() && a.vocab == "test" && !a.output.ends_with(".bin"), "convert: --arch ", a.arch,
                " needs --config, --vocab test and a .gguf OUTPUT (the model a server run of --config and --seed loads)");
        sim::server::write_server_model(model, a.arch, a.window, a.seed, a.output, 120);
        std::printf("convert: random %s seed %llu as arch %s (window %d; kvweld-arch-model, the server simulator's) -> %s\n",
                    a.config.c_str(), (unsigned long long)a.seed, a.arch.c_str(), a.window, a.output.c_str());
        return 0;
    }
    if (a.output.ends_with(".bin"))
        save_llama2c(model, a.output);
    else
        save_gguf(model, a.output, a.vocab == "test" ? Vocab::test : Vocab::none);
    std::printf("convert: %s -> %s (%s)\n", a.config.empty() ? a.input.c_str() : cat("random ", a.config, " seed ", a.seed).c_str(),
                a.output.c_str(), model.config().describe().c_str());
    return 0;
}

}  // namespace

void add_convert_command(CLI::App& app, std::function<int()>& action) {
    auto args = std::make_shared<ConvertArgs>();
    CLI::App* cmd = app.add_subcommand(
        "convert", "Write a model as GGUF for llama.cpp (llama family, F32, no vocabulary unless --vocab test): "
                   "kvweld convert model.bin out.gguf, or kvweld convert --config NAME --seed S out.gguf; "
                   "an OUTPUT ending in .bin is written as a llama2.c checkpoint instead");
    cmd->add_option("INPUT", args->input, "a llama2.c checkpoint (omit with --config)");
    cmd->add_option("OUTPUT", args->output, "the file to write: GGUF, or a llama2.c checkpoint if it ends in .bin");
    cmd->add_option("--config", args->config, cat("a seeded random model of these dims: ", preset_names()));
    cmd->add_option("--seed", args->seed, "weight seed with --config")->capture_default_str()->check(seed_validator());
    cmd->add_option("--vocab", args->vocab,
                    "none: every llama.cpp release loads it, but generating a token aborts llama.cpp; test: llama.cpp's "
                    "dummy tokenizer (token text is its id in hex), which llama-server generates with; b11434 and "
                    "0.3.36 load it, 0.3.16 refuses it")
        ->capture_default_str()
        ->check(CLI::IsMember({"none", "test"}));
    cmd->add_option("--lora", args->lora,
                    "write the I-th LoRA adapter a server run of --config and --seed loads (--engine llama-server: "
                    "its server script's adapter files) instead of the model")
        ->check(CLI::Range(0, 7));
    cmd->add_option("--arch", args->arch,
                    cat("another architecture of --config's shape, with llama.cpp's other memories (", sim::server::arch_names(),
                        "): the model a server run with --params arch=NAME loads, written by kvweld-arch-model"))
        ->capture_default_str()
        ->check([](const std::string& name) {
            try {
                return sim::server::arch_named(name), std::string();
            } catch (const Error& e) {
                return std::string(e.what());  // names the archs
            }
        });
    cmd->add_option("--window", args->window, "the sliding window of an --arch that has one")->capture_default_str()->check(CLI::Range(1, 64));
    cmd->callback([args, &action] {
        // One positional means OUTPUT (with --config); two mean INPUT OUTPUT.
        if (args->output.empty()) std::swap(args->input, args->output);
        action = [args] { return run_convert(*args); };
    });
}

}  // namespace kvweld::cli
