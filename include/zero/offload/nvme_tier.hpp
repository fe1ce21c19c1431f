#pragma once
// Deprecated: moved to zero/nvme/nvme_tier.hpp (the layers, docs/engine-design.md). This forwarding
// header goes away in the next release; include the new path.

#include "zero/nvme/nvme_tier.hpp"
