# cmake -DBUILD_DIR=... -DSOURCE_DIR=... -DWORK_DIR=... -DMODE=install|subdirectory -P run_consumer.cmake
# install: installs the build to a fresh prefix and builds tests/package/consumer against it with
# find_package(zero). subdirectory: builds tests/package/subdirectory_consumer, which vendors the
# source tree. Either way the consumer programs must run successfully.
file(REMOVE_RECURSE ${WORK_DIR})
function(run)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE status)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "failed (${status}): ${ARGV}")
  endif()
endfunction()
if(MODE STREQUAL "install")
  run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix)
  run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/package/consumer -B ${WORK_DIR}/build
      -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DCMAKE_BUILD_TYPE=Release)
  run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
  run(${WORK_DIR}/build/consumer)
  if(EXISTS ${WORK_DIR}/build/consumer_mpi)
    run(${WORK_DIR}/build/consumer_mpi)
  endif()
else()
  run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/package/subdirectory_consumer -B ${WORK_DIR}/build
      -DZERO_SOURCE_DIR=${SOURCE_DIR} -DCMAKE_BUILD_TYPE=Release)
  run(${CMAKE_COMMAND} --build ${WORK_DIR}/build --target consumer)
  run(${WORK_DIR}/build/consumer)
endif()
