#pragma once
// Deprecated: moved to zero/nvme/swap_file.hpp (the layers, docs/engine-design.md). This forwarding
// header goes away in the next release; include the new path.

#include "zero/nvme/swap_file.hpp"
