#pragma once
// Deprecated: moved to zero/nvme/io_stats.hpp (the layers, docs/engine-design.md). This forwarding
// header goes away in the next release; include the new path.

#include "zero/nvme/io_stats.hpp"
