#pragma once
// Reading the top-level "aio" section. DeepSpeed's docs still list `thread_count`, which its code
// no longer reads: accepted with a note. `use_gds` asks for GPUDirect Storage (disk to GPU memory
// without a bounce through the host), which needs a GPU engine: refused by name.

#include "zero/config/aio.hpp"
#include "zero/config/detail/json_reader.hpp"

namespace zero::config::detail {

inline AioConfig read_aio(ObjectReader& reader) {
  AioConfig aio;
  aio.block_size = reader.integer("block_size", aio.block_size, positive);
  aio.queue_depth = reader.integer("queue_depth", aio.queue_depth, positive);
  aio.intra_op_parallelism =
      reader.integer("intra_op_parallelism", aio.intra_op_parallelism, positive);
  aio.single_submit = reader.boolean("single_submit", aio.single_submit);
  aio.overlap_events = reader.boolean("overlap_events", aio.overlap_events);
  if (reader.optional_integer("thread_count", positive))
    reader.context().notes.push_back(
        reader.path_of("thread_count") +
        " is ignored, as DeepSpeed's code ignores it (only its docs still name it); "
        "intra_op_parallelism sets the I/O threads");
  if (reader.boolean("use_gds", false))
    reader.context().unbuilt.push_back(
        {reader.path_of("use_gds") + " = true",
         "GPUDirect Storage needs a GPU engine, which is not built"});
  return aio;
}

} // namespace zero::config::detail
