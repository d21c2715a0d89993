// llama_newest.hpp compiled as the header it is, every feature's block in,
// against the pinned llama.h, in C++17 (llama.cpp's tests' standard).
#include "targets/llamacpp/llama_newest.hpp"
