// Limits of the CUDA plan that host code checks before a decode (so a
// refusal changes nothing), in a header the CUDA kernels can include too.
#pragma once

namespace kvweld {

// LoRA adapters in a set the CUDA plan applies: each one's factor is a
// slot of the fixed per-step data its kernels read.
inline constexpr int kMaxCudaLoras = 8;

}  // namespace kvweld
