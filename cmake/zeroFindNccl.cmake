# Finds NCCL beside the CUDA toolkit (or under NCCL_ROOT) and wraps it in the imported target
# zero::nccl_library. zero::cuda links that target instead of a path, so that the installed
# package names NCCL by target and never by an absolute path of the machine that built zero: the
# package config includes this file to find NCCL again where the package is used. Run it after
# find_package(CUDAToolkit). Sets zero_NCCL_FOUND.
if(TARGET zero::nccl_library)
  set(zero_NCCL_FOUND TRUE)
  return()
endif()
# NCCL_INCLUDE_DIR and NCCL_LIBRARY are cache entries a user may set to pick another NCCL.
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} ${CUDAToolkit_INCLUDE_DIRS}
          PATH_SUFFIXES include)
find_library(NCCL_LIBRARY nccl HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} ${CUDAToolkit_LIBRARY_DIR}
             PATH_SUFFIXES lib lib64)
if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
  # zero's own build sets zero_nccl_scope to GLOBAL: a project that adds zero with
  # add_subdirectory links zero::cuda from directories above the one that made the target.
  add_library(zero::nccl_library UNKNOWN IMPORTED ${zero_nccl_scope})
  set_target_properties(zero::nccl_library PROPERTIES IMPORTED_LOCATION ${NCCL_LIBRARY}
                                                      INTERFACE_INCLUDE_DIRECTORIES ${NCCL_INCLUDE_DIR})
  set(zero_NCCL_FOUND TRUE)
else()
  set(zero_NCCL_FOUND FALSE)
endif()
