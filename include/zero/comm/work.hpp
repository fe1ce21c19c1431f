#pragma once
// Deprecated: moved to zero/core/work.hpp (the layers, docs/engine-design.md). This forwarding
// header goes away in the next release; include the new path.

#include "zero/core/work.hpp"
