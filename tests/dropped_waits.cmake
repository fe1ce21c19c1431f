# Every wait the library needs between streams, dropped in turn (ZERO_TEST_DROP_WAIT, one build):
# the stream-space twin's own comparisons must then fail (cmake/ZeroTesting.cmake,
# zero_add_dropped_wait_test). Each runs the narrowest twin test that catches its site, at the
# fewest ranks that show it (one: the binary alone, without mpirun's second to wind up a failed
# job), on streams that run work only once waited for (deferring), so that the failure does not
# depend on the machine's speed.

zero_add_dropped_wait_test(optimizer.layer_stepped TARGET zero_test_twin_staged
  FILTER DeviceOptimizerStore.WholeGivesTheHostStoresBits
  MATCHES "done[(][)] before its update ran")
zero_add_dropped_wait_test(reducer.packed TARGET zero_test_reduce
  FILTER BucketedReducer.OverAStreamACollectiveWaitsForItsPacking
  MATCHES "of the shard: got .* [(]a collective before its packing[?][)]")
zero_add_dropped_wait_test(reducer.caller TARGET zero_test_reduce
  FILTER BucketedReducer.OverAStreamACollectiveWaitsForItsPacking
  MATCHES "of the shard: got .* [(]a collective before its packing[?][)]")
# At one rank the late write of the gradient lands over the stale average of itself.
zero_add_dropped_wait_test(in_place_reducer.caller TARGET zero_test_twin_staged RANKS 2
  FILTER DeviceGradientStore.CollectivesStartAfterBackwardsWrites
  MATCHES "stage 0 float layout .* step [0-9]: the reduced gradient differs")
zero_add_dropped_wait_test(gather.buffer_reusable TARGET zero_test_engine
  FILTER StreamGather.ABufferIsGatheredIntoOnlyAfterItsQueuedReaders
  MATCHES "its buffer was gathered into before its read")
zero_add_dropped_wait_test(gather.caller TARGET zero_test_engine
  FILTER StreamGather.ABufferIsGatheredIntoOnlyAfterItsQueuedReaders
  MATCHES "its buffer was gathered into before its read")
zero_add_dropped_wait_test(gather.refresh TARGET zero_test_twin_staged
  FILTER DeviceShardedParameters.GathersStartAfterTheStepsWrites
  MATCHES "stage 3 float layout .* held, after step [0-9]: layer")
zero_add_dropped_wait_test(gradients.handed_over TARGET zero_test_engine
  FILTER StreamEngine.ADeferredStreamGivesTheHostThreadsBits
  MATCHES "deferred, [^:]*: layer [0-9]+ element [0-9]+: .* vs ")
# At one rank the average over the replicas writes back what it read, and the late work lands on it.
zero_add_dropped_wait_test(gradients.replicas TARGET zero_test_twin_staged RANKS 2
  FILTER DeviceGradientStore.AveragesOverTheReplicasAfterTheQueuedWork
  MATCHES "own shard groups step [0-9]: the reduced gradient differs")
zero_add_dropped_wait_test(gradients.sums_read_back TARGET zero_test_twin_staged
  FILTER DeviceGradientStore.CollectivesStartAfterBackwardsWrites
  MATCHES "micro-steps 1 step [0-9]: [^\n]* against ")
zero_add_dropped_wait_test(replicated_parameters.caller TARGET zero_test_twin_staged RANKS 2
  FILTER DeviceReplicatedParameters.GathersStartAfterTheStepsWrites
  MATCHES "stages 1/2 float layout .* held, after step [0-9]: layer")
zero_add_dropped_wait_test(sharded_parameters.unpacked TARGET zero_test_engine RANKS 2
  FILTER StreamEngine.ADeferredStreamGivesTheHostThreadsBits
  MATCHES "deferred, stage 3, per-parameter chunks: layer [0-9]+ element [0-9]+: .* vs ")
foreach(site offload.gradients_arrived offload.weights_sent offload.delayed_gradients_arrived)
  zero_add_dropped_wait_test(${site} TARGET zero_test_twin_offload
    FILTER Offload.StoreHandsOnTheHostStoresCopyAtEachDone
    MATCHES "not the host store's compute copy at done")
endforeach()
zero_add_dropped_wait_test(offload.gradient_reduced TARGET zero_test_twin_offload
  FILTER Offload.GradientsLeaveDuringBackwardAfterTheirDelivery
  MATCHES "not the host store's compute copy [(]a gradient sent before its delivery[?][)]")
zero_add_dropped_wait_test(offload.speculated_gradient_arrived TARGET zero_test_twin_offload
  FILTER Offload.SpeculationUpdatesALayerOnlyOnceItsGradientArrived
  MATCHES "a layer updated before its gradient arrived[?]")
