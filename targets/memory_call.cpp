#include "targets/memory_call.hpp"

#include "util/overloaded.hpp"

#include "targets/engine.hpp"
#include "util/error.hpp"

namespace kvweld::targets {

namespace {

[[noreturn]] void own_bytes() { throw Error("a state save or load moves the caller's own bytes: make it directly"); }

}  // namespace

void apply_call(Engine& e, const MemoryCall& call) {
    std::visit(Overloaded{
                   [&](const calls::Open& c) { e.open(c.seq); },
                   [&](const calls::OpenSized& c) { e.white_box()->open_sized(c.seq, c.capacity, c.recycle); },
                   [&](const calls::Close& c) { e.close(c.seq); },
                   [&](const calls::Truncate& c) { e.truncate(c.seq, c.n); },
                   [&](const calls::Clear& c) { e.clear(c.seq); },
                   [&](const calls::Copy& c) {
                       if (c.opened) e.open(c.dst);
                       e.copy(c.src, c.dst);
                   },
                   [&](const calls::ClearAll&) { e.clear_all(); },
                   [&](const calls::Reload& c) { e.reload(*c.model); },
                   [&](const calls::SwapLayer& c) { e.swap_layer(c.seq, c.layer); },
                   [&](const calls::PoolOp& c) { e.pool_op(c.op); },
                   [&](const calls::Migrate& c) { e.white_box()->migrate(c.from, c.to); },
                   [&](const calls::SetLoras& c) { e.set_loras(c.uses); },
                   [&](const calls::SetCvec& c) { e.set_cvec(c.cvec); },
                   [&](const calls::SetWarmup& c) { e.set_warmup(c.on); },
                   [&](const calls::Shift& c) { e.shift(c.seq, c.p0, c.p1); },
                   [&](const calls::SetLive& c) { e.set_live(c.key, c.value); },
                   [&](const calls::SetSampler& c) { e.set_sampler(c.seq, c.spec ? &*c.spec : nullptr, c.in_place); },
                   [&](const calls::Save&) { own_bytes(); },
                   [&](const calls::Load&) { own_bytes(); },
                   [&](const calls::LoadRefused&) { own_bytes(); },
               },
               call);
}

}  // namespace kvweld::targets
