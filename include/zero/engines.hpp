#pragma once
// The prebuilt engines: the engines that zero's examples and guides train with, compiled once
// into the library zero::engines (src/engines/), so that a trainer naming one of them compiles in
// the seconds its front end takes instead of compiling the engine's stores, reductions and
// checkpoints again (docs/compiled-engines.md).
//
//   #include <zero/engines.hpp>   // link zero::engines
//   zero::Engine<zero::Stage<3>, zero::MpiCommunicator, zero::host, zero::AdamW,
//                zero::AnyLossScaler> engine(comm, parameters, adamw, scaler, options);
//
// The set (ZERO_PREBUILT_ENGINES_OF_STAGE below; 17 engines):
//   - Engine<Stage<S>, MpiCommunicator, host, Opt, AnyLossScaler> for S = 0..3 and Opt = Adam,
//     AdamW, SGD and Lamb: what a trainer that takes its stage, optimizer and precision from flags
//     or a DeepSpeed config builds (examples/train_mlp, examples/train_gpt);
//   - Engine<Stage<3>, MpiCommunicator, host, AdamW, DynamicLossScaler>: docs/training-loop.md's.
// Each with every compute type (zero::AllComputeTypes). Any other engine (another communicator,
// placement, plan, scaler or a policy of one's own) is compiled from the headers where it is
// named, exactly as without the library: the library is a cache, not a second interface.
//
// Where zero::engines is not linked (the target defines ZERO_HAS_ENGINES), this header declares
// nothing, and these engines too are compiled from the headers. Where it is, a unit that names
// another engine too includes <zero/engine/engine.hpp> (or <zero/zero.hpp>) for its definitions:
// without them that engine's members are undefined when the program links. A unit compiled for
// other instruction sets than the library was names other engines (zero/core/instruction_set.hpp):
// it fails to link, naming an undefined zero::<instruction sets>::Engine<...>.

#include "zero/comm/mpi_communicator.hpp"
#include "zero/optim/adam.hpp"
#include "zero/optim/lamb.hpp"
#include "zero/optim/sgd.hpp"
#include "zero/precision/any_loss_scaler.hpp"
#include "zero/precision/loss_scaler.hpp"
#include "zero/stage/placement.hpp"

// Where the library holds these engines, the engine's class without its members' definitions:
// this unit compiles none of them, and parses half the code (a unit that also names an engine
// of its own includes <zero/engine/engine.hpp> for it). Elsewhere the whole engine.
#if ZERO_HAS_ENGINES
#include "zero/engine/engine_class.hpp"
#else
#include "zero/engine/engine.hpp"
#endif

namespace zero {

// The prebuilt engine of stage S with optimizer Opt and the loss scaling chosen at run time.
template <int S, class Opt>
using PrebuiltEngine = Engine<Stage<S>, MpiCommunicator, host, Opt, AnyLossScaler>;

// docs/training-loop.md's engine.
using GuideEngine = Engine<Stage<3>, MpiCommunicator, host, AdamW, DynamicLossScaler>;

} // namespace zero

// The set, once, for the declarations here and the definitions in src/engines/: X(S, Opt) for
// each optimizer of PrebuiltEngine<S, Opt> (an explicit instantiation names the class template,
// not an alias of it, hence the macros).
#define ZERO_PREBUILT_ENGINES_OF_STAGE(X, S) X(S, Adam) X(S, AdamW) X(S, SGD) X(S, Lamb)
#define ZERO_PREBUILT_ENGINE_TYPE(S, Opt)                                                          \
  ::zero::Engine<::zero::Stage<S>, ::zero::MpiCommunicator, ::zero::host, ::zero::Opt,             \
                 ::zero::AnyLossScaler>
#define ZERO_GUIDE_ENGINE_TYPE                                                                     \
  ::zero::Engine<::zero::Stage<3>, ::zero::MpiCommunicator, ::zero::host, ::zero::AdamW,           \
                 ::zero::DynamicLossScaler>

#if ZERO_HAS_ENGINES
#define ZERO_DECLARE_PREBUILT_ENGINE(S, Opt)                                                       \
  extern template class ZERO_PREBUILT_ENGINE_TYPE(S, Opt);
ZERO_PREBUILT_ENGINES_OF_STAGE(ZERO_DECLARE_PREBUILT_ENGINE, 0)
ZERO_PREBUILT_ENGINES_OF_STAGE(ZERO_DECLARE_PREBUILT_ENGINE, 1)
ZERO_PREBUILT_ENGINES_OF_STAGE(ZERO_DECLARE_PREBUILT_ENGINE, 2)
ZERO_PREBUILT_ENGINES_OF_STAGE(ZERO_DECLARE_PREBUILT_ENGINE, 3)
extern template class ZERO_GUIDE_ENGINE_TYPE;
#undef ZERO_DECLARE_PREBUILT_ENGINE
#endif
