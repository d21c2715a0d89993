// The reproducers' prelude compiled as the header it is, every feature's
// block in, against the pinned llama.h: a program carries a part of this
// text, so an error here would be an error in some program.
#include "targets/llamacpp/llamacpp_repro_prelude.hpp"
