#pragma once
// Deprecated: moved to zero/nvme/bounce_buffers.hpp (the layers, docs/engine-design.md). This
// forwarding header goes away in the next release; include the new path.

#include "zero/nvme/bounce_buffers.hpp"
