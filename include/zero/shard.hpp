#pragma once
// Everything of zero/shard/: partitioners, layouts and ShardedTensor. See
// docs/sharding-policies.md.

#include "zero/shard/flat_contiguous.hpp"
#include "zero/shard/gathered.hpp"
#include "zero/shard/layout_builder.hpp"
#include "zero/shard/parameter.hpp"
#include "zero/shard/partitioner.hpp"
#include "zero/shard/per_parameter.hpp"
#include "zero/shard/policy.hpp"
#include "zero/shard/shard_layout.hpp"
#include "zero/shard/sharded_tensor.hpp"
#include "zero/shard/verify.hpp"
#include "zero/shard/whole_parameter_greedy.hpp"
