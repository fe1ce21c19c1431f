// The prebuilt engines of ZeRO stage 3 (zero/engines.hpp), one unit per stage so that they
// compile in parallel, and docs/training-loop.md's.
#include "zero/engine/engine.hpp" // the members' definitions, which the library compiles
#include "zero/engines.hpp"

#define ZERO_DEFINE_PREBUILT_ENGINE(S, Opt) template class ZERO_PREBUILT_ENGINE_TYPE(S, Opt);
ZERO_PREBUILT_ENGINES_OF_STAGE(ZERO_DEFINE_PREBUILT_ENGINE, 3)
template class ZERO_GUIDE_ENGINE_TYPE;
