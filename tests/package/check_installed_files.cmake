# cmake -DPREFIX=... -P check_installed_files.cmake (run_consumer.cmake runs it after installing)
# What `cmake --install` puts in a prefix is what a user links and runs: zero's headers, the
# package's CMake files, the compiled libraries of zero::mpi, zero::engines and zero::cuda (libzero_cuda.a is
# zero::cuda's CUDA units, linked by users of that component) and the tools (zero-*). An example
# program, a test or a benchmark in the prefix fails, named.
cmake_minimum_required(VERSION 3.25)
file(GLOB_RECURSE installed LIST_DIRECTORIES false RELATIVE ${PREFIX} ${PREFIX}/*)
set(allowed "^(include/zero/.+"
            "|lib[^/]*/cmake/zero/zero[A-Za-z]*(-[a-z]+)?\\.cmake"
            "|lib[^/]*/libzero_(mpi|engines|cuda)\\.a"
            "|bin/zero-[a-z-]+)$")
string(CONCAT allowed ${allowed})
set(unexpected "")
foreach(file IN LISTS installed)
  if(NOT file MATCHES "${allowed}")
    list(APPEND unexpected ${file})
  endif()
endforeach()
if(unexpected)
  list(JOIN unexpected ", " unexpected)
  message(FATAL_ERROR "cmake --install put files in the prefix that no user links or runs as a "
                      "tool (an example, a test or a benchmark?): ${unexpected}")
endif()
if(NOT "include/zero/zero.hpp" IN_LIST installed)
  message(FATAL_ERROR "cmake --install left out include/zero/zero.hpp")
endif()
list(LENGTH installed count)
message(STATUS "package test: ${count} files installed, each a header, a package file, a library "
               "or a tool")
