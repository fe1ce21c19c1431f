# Helpers that register zero's tests with CTest.
#
# zero_add_test(name SOURCES ... [LIBRARIES ...] [LABELS ...] [CAN_SKIP group filter ...])
#   A plain GoogleTest binary, one process.
# zero_add_mpi_test(name SOURCES ... [LIBRARIES ...] [RANKS 1 2 3] [LABELS ...] [ENVIRONMENT ...]
#                   [CAN_SKIP group filter ...])
#   A GoogleTest binary with the MPI-aware main, registered once per rank count as name.npN;
#   a failure on any rank fails the run.
#
# Every binary exits as tests/support/test_outcome.hpp says: 77 (CTest: skipped) when every test
# skipped, and a failure when a test skips while others pass, since CTest would show that run as
# passed. Tests that may skip because the machine cannot do what they need (mount a file system,
# lock memory) are named in CAN_SKIP: pairs of a group name and a GoogleTest filter. Each group is
# a CTest test of its own (name.group, or name.group.npN), and the binary's main registration runs
# without them, so a skip always shows in CTest's summary with its reason in the output.

set(ZERO_TEST_RANKS 1 2 3 CACHE STRING "Rank counts every MPI test runs at")
set(ZERO_TEST_TIMEOUT_S 60 CACHE STRING "ZERO_TIMEOUT_S for tests: a stuck collective aborts after this")

# Open MPI's report of the handles left at MPI_Finalize (mpi_show_handle_leaks) is on in the MPI
# tests, and a test registered by zero_add_mpi_test fails on its warnings
# (zero_mpi_handle_leak_warning). It names windows, infos, files and communicators that something
# still holds; a communicator merely forgotten is freed without a word, which the MPI test main's
# own ledger reports instead (tests/support/mpi_handle_ledger.hpp).
set(zero_mpi_test_environment
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
    OMPI_MCA_mpi_show_handle_leaks=1 ZERO_VALIDATE=1 ZERO_TIMEOUT_S=${ZERO_TEST_TIMEOUT_S})
set(zero_mpi_handle_leak_warning "still allocated (in|at) MPI_F(inalize|INALIZE)")

# The registrations of a binary with CAN_SKIP groups: sets <prefix>_suffixes (".group" each, and
# "." standing for the main registration) and <prefix>_filters (the --gtest_filter of each).
function(zero_skip_groups prefix)
  set(suffixes ".")
  set(filters "")
  set(excluded "")
  set(separator "")
  list(LENGTH ARGN n)
  math(EXPR odd "${n} % 2")
  if(odd)
    message(FATAL_ERROR "zero: CAN_SKIP takes pairs of a group name and a GoogleTest filter: ${ARGN}")
  endif()
  set(i 0)
  while(i LESS n)
    list(GET ARGN ${i} group)
    math(EXPR i "${i} + 1")
    list(GET ARGN ${i} filter)
    math(EXPR i "${i} + 1")
    list(APPEND suffixes ".${group}")
    list(APPEND filters "--gtest_filter=${filter}")
    string(APPEND excluded "${separator}${filter}")
    set(separator ":")
  endwhile()
  if(excluded)
    list(PREPEND filters "--gtest_filter=*-${excluded}")
  else()
    list(PREPEND filters "--gtest_filter=*")
  endif()
  set(${prefix}_suffixes ${suffixes} PARENT_SCOPE)
  set(${prefix}_filters ${filters} PARENT_SCOPE)
endfunction()

# ZERO_TEST_COMPILE_OPTIONS (tests/CMakeLists.txt), each option for C++ sources only: the list
# that add_compile_options takes, one generator expression per option.
function(zero_test_compile_options out)
  set(options "")
  foreach(option IN LISTS ZERO_TEST_COMPILE_OPTIONS)
    list(APPEND options "$<$<COMPILE_LANGUAGE:CXX>:${option}>")
  endforeach()
  set(${out} ${options} PARENT_SCOPE)
endfunction()

# Each test binary's sources compile as one translation unit (CMake's unity build): they parse the
# same headers and instantiate the same engines, and zero_test_engine's seven sources took 76 s as
# one against 266 s apart (GCC with the dev preset's flags, side by side). So the file-scope names
# of a test file (its anonymous namespace too) must differ from those of the other files of its
# binary: a file whose helpers would clash keeps them, and its tests, in a namespace named after
# it. -DZERO_TEST_UNITY_BUILD=OFF compiles the sources apart.
option(ZERO_TEST_UNITY_BUILD "Compile each test binary's sources as one translation unit" ON)
function(zero_test_unity_build target)
  if(ZERO_TEST_UNITY_BUILD)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 0)
    # GCC warns about a class template's member of a type from a test's anonymous namespace once
    # the test file is an included one, as in a unity source; that is no error in a test program.
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANG_AND_ID:CXX,GNU>:-Wno-subobject-linkage>)
  endif()
endfunction()

# A preset may leave out test binaries whose checks another build makes (the tsan preset:
# zero_test_engine_lamb, docs/reliability.md): zero_add_test and zero_add_mpi_test neither build
# nor register those named here.
# Only a binary that no other test names (the multinode tests run zero_test_engine, say).
set(ZERO_TEST_EXCLUDED_BINARIES "" CACHE STRING
    "Test binaries not to build or run (a list; none that another test runs)")
function(zero_test_excluded name out)
  set_property(GLOBAL APPEND PROPERTY zero_test_binaries ${name})
  if(name IN_LIST ZERO_TEST_EXCLUDED_BINARIES)
    set(${out} TRUE PARENT_SCOPE)
  else()
    set(${out} FALSE PARENT_SCOPE)
  endif()
endfunction()

function(zero_add_test name)
  cmake_parse_arguments(arg "" "" "SOURCES;LIBRARIES;LABELS;CAN_SKIP" ${ARGN})
  zero_test_excluded(${name} excluded)
  if(excluded)
    return()
  endif()
  add_executable(${name} ${arg_SOURCES})
  zero_test_unity_build(${name})
  target_link_libraries(${name} PRIVATE zero::zero zero_build_flags zero_test_main ${arg_LIBRARIES})
  zero_skip_groups(registration ${arg_CAN_SKIP})
  foreach(suffix filter IN ZIP_LISTS registration_suffixes registration_filters)
    set(test ${name})
    if(NOT suffix STREQUAL ".")
      string(APPEND test ${suffix})
    endif()
    add_test(NAME ${test} COMMAND ${name} ${filter})
    set_tests_properties(${test} PROPERTIES LABELS "unit;${arg_LABELS}" TIMEOUT 600
                                            SKIP_RETURN_CODE 77)
  endforeach()
endfunction()

# zero_add_output_test(name MATCHES regex [FAILS | STATUS n] COMMAND program args...)
#   Passes when the command exits with 0 (with FAILS: refuses, with a status from 1 to 127; with
#   STATUS: exactly n) and its output matches `regex` (tests/support/expect_output.py; '.' matches
#   newlines, as in CMake's regular expressions). CTest's PASS_REGULAR_EXPRESSION alone ignores the
#   exit status, so a crash after the expected line would pass; do not use it. Without FAILS or
#   STATUS, a status of 77 reports skipped; with FAILS it fails (a refusal was expected).
find_package(Python3 COMPONENTS Interpreter REQUIRED)
function(zero_add_output_test name)
  cmake_parse_arguments(arg "FAILS" "MATCHES;STATUS" "COMMAND" ${ARGN})
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "zero_add_output_test(${name}): unexpected '${arg_UNPARSED_ARGUMENTS}'; a ';' "
                        "in MATCHES splits the expression (match it with '.'), and COMMAND comes last")
  endif()
  set(expect "")
  if(arg_FAILS)
    set(expect --fails)
  elseif(DEFINED arg_STATUS)
    set(expect --status ${arg_STATUS})
  endif()
  add_test(NAME ${name}
           COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/support/expect_output.py
                   --matches "${arg_MATCHES}" ${expect} -- ${arg_COMMAND})
  set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE 77)
endfunction()

function(zero_mpi_command out np)
  set(${out} ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} --oversubscribe ${MPIEXEC_PREFLAGS} PARENT_SCOPE)
endfunction()

# zero_add_dropped_wait_test(site TARGET binary [RANKS n] FILTER gtest-filter MATCHES regex)
#   The stream-space twin must catch a wait missing inside the library, not only in pipelines the
#   tests write: runs the tests of `binary` that FILTER selects (under mpirun at RANKS ranks, or
#   alone) with ZERO_TEST_DROP_WAIT=site (include/zero/core/dropped_waits.hpp), and passes only when
#   that run fails through their own comparison: a status from 1 to 127 (no crash, no timeout), the
#   library's note that it dropped the wait at `site`, and the comparison's failure message MATCHES
#   (a regular expression). Without the switch the same tests pass in the binary's own registration.
#   Registered as zero_test_dropped_wait.<site>[.npN], label dropped_wait; not in builds with a
#   sanitizer (ZERO_TEST_DROPPED_WAITS), which report what the broken ordering causes instead.
if(CMAKE_CXX_FLAGS MATCHES "-fsanitize=")
  set(zero_dropped_waits_default OFF)
else()
  set(zero_dropped_waits_default ON)
endif()
option(ZERO_TEST_DROPPED_WAITS "Tests that drop a wait inside the library and expect the twin to catch it"
       ${zero_dropped_waits_default})
function(zero_add_dropped_wait_test site)
  cmake_parse_arguments(arg "" "TARGET;RANKS;FILTER;MATCHES" "" ${ARGN})
  if(arg_UNPARSED_ARGUMENTS OR NOT arg_TARGET OR NOT arg_FILTER OR NOT arg_MATCHES)
    message(FATAL_ERROR "zero_add_dropped_wait_test(${site}): give TARGET, FILTER and MATCHES")
  endif()
  if(NOT ZERO_TEST_DROPPED_WAITS OR NOT TARGET ${arg_TARGET})
    return() # switched off, or the binary is not built here (ZERO_TEST_AREAS)
  endif()
  set(name zero_test_dropped_wait.${site})
  set(command $<TARGET_FILE:${arg_TARGET}> --gtest_filter=${arg_FILTER})
  set(processors 1)
  if(arg_RANKS)
    zero_mpi_command(launcher ${arg_RANKS})
    list(PREPEND command ${launcher})
    string(APPEND name .np${arg_RANKS})
    set(processors ${arg_RANKS})
  endif()
  string(REPLACE "." "[.]" site_pattern "${site}")
  zero_add_output_test(${name} FAILS
    MATCHES "^(?=.*dropping the wait at ${site_pattern} )(?=.*${arg_MATCHES})"
    COMMAND ${command})
  set_tests_properties(${name} PROPERTIES LABELS "dropped_wait;mpi" PROCESSORS ${processors}
    TIMEOUT 300 ENVIRONMENT "${zero_mpi_test_environment};ZERO_TEST_DROP_WAIT=${site}")
endfunction()

function(zero_add_mpi_test name)
  cmake_parse_arguments(arg "" "" "SOURCES;LIBRARIES;LABELS;RANKS;ENVIRONMENT;CAN_SKIP" ${ARGN})
  zero_test_excluded(${name} excluded)
  if(excluded)
    return()
  endif()
  if(NOT arg_RANKS)
    set(arg_RANKS ${ZERO_TEST_RANKS})
  endif()
  add_executable(${name} ${arg_SOURCES})
  zero_test_unity_build(${name})
  target_link_libraries(${name} PRIVATE zero::mpi zero_build_flags zero_test_mpi_main ${arg_LIBRARIES})
  zero_skip_groups(registration ${arg_CAN_SKIP})
  foreach(np IN LISTS arg_RANKS)
    zero_mpi_command(launcher ${np})
    foreach(suffix filter IN ZIP_LISTS registration_suffixes registration_filters)
      set(test ${name})
      if(NOT suffix STREQUAL ".")
        string(APPEND test ${suffix})
      endif()
      add_test(NAME ${test}.np${np} COMMAND ${launcher} $<TARGET_FILE:${name}> ${filter})
      set_tests_properties(${test}.np${np} PROPERTIES
        LABELS "mpi;${arg_LABELS}" PROCESSORS ${np} TIMEOUT 600 SKIP_RETURN_CODE 77
        ENVIRONMENT "${zero_mpi_test_environment};${arg_ENVIRONMENT}"
        FAIL_REGULAR_EXPRESSION "${zero_mpi_handle_leak_warning}")
    endforeach()
  endforeach()
endfunction()

# zero_add_gpu_test(name SOURCES ... [LIBRARIES ...])
#   A GoogleTest binary linked with zero::cuda, labelled `gpu`. Its main exits with 77 (CTest:
#   skipped) when no CUDA device is present, so CPU-only machines report it as skipped, not passed.
#   With ZERO_GPU_TESTS=syntax (tools/zero-test sets it where no device is present) the sources are
#   only checked by the compiler (-fsyntax-only: parsed, every template instantiated, no code), which
#   takes 30% of the time of building them, and the test reports skipped saying so.
set(ZERO_GPU_TESTS "programs" CACHE STRING
    "The GPU tests: programs (built, run where a device is present) or syntax (checked by the compiler only)")
set_property(CACHE ZERO_GPU_TESTS PROPERTY STRINGS programs syntax)
if(NOT ZERO_GPU_TESTS MATCHES "^(programs|syntax)$")
  message(FATAL_ERROR "ZERO_GPU_TESTS is '${ZERO_GPU_TESTS}': say programs or syntax")
endif()
function(zero_add_gpu_test name)
  if(NOT ZERO_CUDA_FOUND)
    return()
  endif()
  cmake_parse_arguments(arg "" "" "SOURCES;LIBRARIES;LABELS" ${ARGN})
  if(ZERO_GPU_TESTS STREQUAL "syntax")
    add_library(${name} OBJECT ${arg_SOURCES})
    set_target_properties(${name} PROPERTIES CXX_COMPILER_LAUNCHER ${PROJECT_SOURCE_DIR}/cmake/zero-syntax-only)
    set(message "${name}: checked by the compiler only (ZERO_GPU_TESTS=syntax), not built: no CUDA device here")
    add_test(NAME ${name} COMMAND sh -c "echo '${message}'; exit 77")
  else()
    add_executable(${name} ${arg_SOURCES})
    add_test(NAME ${name} COMMAND ${name})
  endif()
  zero_test_unity_build(${name})
  target_link_libraries(${name} PRIVATE zero::cuda zero_build_flags zero_test_gpu_main ${arg_LIBRARIES})
  set_tests_properties(${name} PROPERTIES LABELS "gpu;${arg_LABELS}" SKIP_RETURN_CODE 77 TIMEOUT 600)
endfunction()

# zero_add_compile_fail_tests(group SOURCE file.cpp CASES name regex [name regex ...]
#                             [LIBRARIES ...])
#   Several programs that must NOT compile, written as one source (a namespace per case): the
#   test group.compile builds it once (excluded from `all`), passes only when that fails, and keeps
#   the compiler's report; each case's test `name` then passes only when the report holds its REGEX.
#   One compile for all: zero_test_engine's seven rejections took 13 s together against 7-8 s each
#   apart. Each REGEX must name its case's own message (a static_assert's text, not a concept that
#   other cases' reports mention too): the report holds every case's.
function(zero_add_compile_fail_tests group)
  cmake_parse_arguments(arg "" "SOURCE" "CASES;LIBRARIES" ${ARGN})
  list(LENGTH arg_CASES items)
  math(EXPR odd "${items} % 2")
  if(arg_UNPARSED_ARGUMENTS OR NOT arg_SOURCE OR items EQUAL 0 OR odd)
    message(FATAL_ERROR "zero_add_compile_fail_tests(${group}): give SOURCE and CASES as pairs of "
                        "a test name and its pattern")
  endif()
  add_executable(${group} EXCLUDE_FROM_ALL ${arg_SOURCE})
  target_link_libraries(${group} PRIVATE zero::zero ${arg_LIBRARIES})
  # Every case's message in the report: clang stops after 20 errors unless told otherwise.
  target_compile_options(${group} PRIVATE $<$<CXX_COMPILER_ID:Clang>:-ferror-limit=0>)
  set(report ${CMAKE_CURRENT_BINARY_DIR}/${group}.report)
  add_test(NAME ${group}.compile
           COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/support/expect_output.py
                   --matches "error" --fails --save ${report}
                   -- ${CMAKE_COMMAND} --build ${CMAKE_BINARY_DIR} --target ${group}
                      --config $<CONFIG>)
  set_tests_properties(${group}.compile PROPERTIES LABELS "compile_fail" TIMEOUT 300
                                                   FIXTURES_SETUP ${group})
  while(arg_CASES)
    list(POP_FRONT arg_CASES name regex)
    if(regex STREQUAL "")
      message(FATAL_ERROR "zero_add_compile_fail_tests(${group}): ${name} has an empty pattern")
    endif()
    zero_add_output_test(${name} MATCHES "${regex}" COMMAND ${CMAKE_COMMAND} -E cat ${report})
    set_tests_properties(${name} PROPERTIES LABELS "compile_fail" FIXTURES_REQUIRED ${group})
  endwhile()
endfunction()

# zero_add_compile_fail_test(name SOURCE file.cpp REGEX "expected message" [LIBRARIES ...])
#   A program that must NOT compile: the test builds it (it is excluded from `all`) and passes
#   only when the compiler's output contains REGEX, e.g. a static_assert's text.
function(zero_add_compile_fail_test name)
  cmake_parse_arguments(arg "" "SOURCE;REGEX" "LIBRARIES" ${ARGN})
  add_executable(${name} EXCLUDE_FROM_ALL ${arg_SOURCE})
  target_link_libraries(${name} PRIVATE zero::zero ${arg_LIBRARIES})
  zero_add_output_test(${name} FAILS MATCHES "${arg_REGEX}"
    COMMAND ${CMAKE_COMMAND} --build ${CMAKE_BINARY_DIR} --target ${name} --config $<CONFIG>)
  set_tests_properties(${name} PROPERTIES LABELS "compile_fail" TIMEOUT 300)
endfunction()
