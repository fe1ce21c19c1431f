#pragma once
// Deprecated: moved to zero/engine/offload_options.hpp (the layers, docs/engine-design.md). This
// forwarding header goes away in the next release; include the new path.

#include "zero/engine/offload_options.hpp"
