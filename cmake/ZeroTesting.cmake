# Helpers that register zero's tests with CTest.
#
# zero_add_test(name SOURCES ... [LIBRARIES ...] [LABELS ...])
#   A plain GoogleTest binary, one process.
# zero_add_mpi_test(name SOURCES ... [LIBRARIES ...] [RANKS 1 2 3] [LABELS ...] [ENVIRONMENT ...])
#   A GoogleTest binary with the MPI-aware main, registered once per rank count as name.npN;
#   a failure on any rank fails the run.

set(ZERO_TEST_RANKS 1 2 3 CACHE STRING "Rank counts every MPI test runs at")
set(ZERO_TEST_TIMEOUT_S 60 CACHE STRING "ZERO_TIMEOUT_S for tests: a stuck collective aborts after this")

set(zero_mpi_test_environment
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
    ZERO_VALIDATE=1 ZERO_TIMEOUT_S=${ZERO_TEST_TIMEOUT_S})

function(zero_add_test name)
  cmake_parse_arguments(arg "" "" "SOURCES;LIBRARIES;LABELS" ${ARGN})
  add_executable(${name} ${arg_SOURCES})
  target_link_libraries(${name} PRIVATE zero::zero zero_build_flags GTest::gtest GTest::gtest_main ${arg_LIBRARIES})
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES LABELS "unit;${arg_LABELS}" TIMEOUT 600)
endfunction()

function(zero_mpi_command out np)
  set(${out} ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} --oversubscribe ${MPIEXEC_PREFLAGS} PARENT_SCOPE)
endfunction()

function(zero_add_mpi_test name)
  cmake_parse_arguments(arg "" "" "SOURCES;LIBRARIES;LABELS;RANKS;ENVIRONMENT" ${ARGN})
  if(NOT arg_RANKS)
    set(arg_RANKS ${ZERO_TEST_RANKS})
  endif()
  add_executable(${name} ${arg_SOURCES})
  target_link_libraries(${name} PRIVATE zero::mpi zero_build_flags zero_test_mpi_main ${arg_LIBRARIES})
  foreach(np IN LISTS arg_RANKS)
    zero_mpi_command(launcher ${np})
    add_test(NAME ${name}.np${np} COMMAND ${launcher} $<TARGET_FILE:${name}>)
    set_tests_properties(${name}.np${np} PROPERTIES
      LABELS "mpi;${arg_LABELS}" PROCESSORS ${np} TIMEOUT 600
      ENVIRONMENT "${zero_mpi_test_environment};${arg_ENVIRONMENT}")
  endforeach()
endfunction()

# zero_add_gpu_test(name SOURCES ... [LIBRARIES ...])
#   A GoogleTest binary linked with zero::cuda, labelled `gpu`. Its main exits with 77 (CTest:
#   skipped) when no CUDA device is present, so CPU-only machines report it as skipped, not passed.
function(zero_add_gpu_test name)
  if(NOT ZERO_CUDA_FOUND)
    return()
  endif()
  cmake_parse_arguments(arg "" "" "SOURCES;LIBRARIES;LABELS" ${ARGN})
  add_executable(${name} ${arg_SOURCES})
  target_link_libraries(${name} PRIVATE zero::cuda zero_build_flags zero_test_gpu_main ${arg_LIBRARIES})
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES LABELS "gpu;${arg_LABELS}" SKIP_RETURN_CODE 77 TIMEOUT 600)
endfunction()

# zero_add_compile_fail_test(name SOURCE file.cpp REGEX "expected message" [LIBRARIES ...])
#   A program that must NOT compile: the test builds it (it is excluded from `all`) and passes
#   only when the compiler's output contains REGEX, e.g. a static_assert's text.
function(zero_add_compile_fail_test name)
  cmake_parse_arguments(arg "" "SOURCE;REGEX" "LIBRARIES" ${ARGN})
  add_executable(${name} EXCLUDE_FROM_ALL ${arg_SOURCE})
  target_link_libraries(${name} PRIVATE zero::zero ${arg_LIBRARIES})
  add_test(NAME ${name}
           COMMAND ${CMAKE_COMMAND} --build ${CMAKE_BINARY_DIR} --target ${name} --config $<CONFIG>)
  set_tests_properties(${name} PROPERTIES LABELS "compile_fail" PASS_REGULAR_EXPRESSION "${arg_REGEX}"
                                          TIMEOUT 300)
endfunction()
