# cmake -DBUILD_DIR=... -DSOURCE_DIR=... -DWORK_DIR=... -DMODE=install|subdirectory -P run_consumer.cmake
# install: installs the build to a prefix, moves the prefix elsewhere (the package must not remember
# where it was installed), then against the moved prefix: builds and runs tests/package/consumer
# asking for no component on a machine where CUDA and MPI cannot be found; builds it asking for
# every component zero was built with, and runs the MPI program; and configures tests/package/probe,
# which checks what find_package(zero) says about components it cannot have. subdirectory: builds
# tests/package/subdirectory_consumer, which vendors the source tree. Each step prints its time.
file(REMOVE_RECURSE ${WORK_DIR})
string(TIMESTAMP started "%s")
function(run)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE status)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "failed (${status}): ${ARGV}")
  endif()
endfunction()
function(lap what)
  string(TIMESTAMP now "%s")
  math(EXPR seconds "${now} - ${started}")
  message(STATUS "package test: ${what} after ${seconds} s")
endfunction()

if(MODE STREQUAL "subdirectory")
  run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/package/subdirectory_consumer -B ${WORK_DIR}/build
      -DZERO_SOURCE_DIR=${SOURCE_DIR} -DCMAKE_BUILD_TYPE=Release)
  run(${CMAKE_COMMAND} --build ${WORK_DIR}/build --target consumer)
  run(${WORK_DIR}/build/consumer)
  lap("subdirectory consumer built and run")
  return()
endif()

run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/installed)
file(RENAME ${WORK_DIR}/installed ${WORK_DIR}/moved)
set(prefix ${WORK_DIR}/moved)
file(GLOB package_dir ${prefix}/lib*/cmake/zero)
file(GLOB target_files ${package_dir}/zero*Targets*.cmake)
foreach(file IN LISTS target_files)
  # Installed targets name their dependencies by target, and their own files from _IMPORT_PREFIX.
  file(STRINGS ${file} absolute REGEX "^ *(INTERFACE_|IMPORTED_LOCATION).*(\"/|;/)|/usr/local/cuda")
  if(absolute)
    message(FATAL_ERROR "${file} holds absolute paths: ${absolute}")
  endif()
endforeach()
set(zero_built_components "")
foreach(component mpi:Mpi nvme:Nvme cuda:Cuda)
  string(REPLACE ":" ";" component ${component})
  list(GET component 0 name)
  list(GET component 1 file_name)
  if(EXISTS ${package_dir}/zero${file_name}Targets.cmake)
    list(APPEND zero_built_components ${name})
  endif()
endforeach()
lap("installed, moved and checked for absolute paths (built with: ${zero_built_components})")

# A machine without CUDA or MPI: no nvcc on PATH, and neither package can be found (MPI's compiler
# wrappers stay on PATH beside the C++ compiler, but find_package(MPI) is disabled).
set(path "")
string(REPLACE ":" ";" entries "$ENV{PATH}")
foreach(entry IN LISTS entries)
  if(NOT EXISTS ${entry}/nvcc)
    list(APPEND path ${entry})
  endif()
endforeach()
string(REPLACE ";" ":" path "${path}")
set(no_cuda ${CMAKE_COMMAND} -E env PATH=${path} --unset=CUDA_PATH --unset=CUDACXX
    ${CMAKE_COMMAND} --no-warn-unused-cli -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON
    -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON
    -DCUDAToolkit_ROOT=${WORK_DIR}/no-cuda)
run(${no_cuda} -S ${SOURCE_DIR}/tests/package/consumer -B ${WORK_DIR}/headers
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/headers)
run(${WORK_DIR}/headers/consumer)
lap("zero::zero consumer built and run without CUDA or MPI")

string(REPLACE ";" "," components "config;${zero_built_components}")
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/package/consumer -B ${WORK_DIR}/components
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release -DZERO_COMPONENTS=${components})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/components --parallel 2)
if(EXISTS ${WORK_DIR}/components/consumer_mpi)
  run(${WORK_DIR}/components/consumer_mpi)
endif()
lap("consumer asking for ${components} built and run")

execute_process(COMMAND ${no_cuda} -S ${SOURCE_DIR}/tests/package/probe -B ${WORK_DIR}/probe
                        -DCMAKE_PREFIX_PATH=${prefix} "-DZERO_BUILT_COMPONENTS=${zero_built_components}"
                RESULT_VARIABLE status OUTPUT_VARIABLE output ERROR_VARIABLE output)
message(STATUS "${output}")
if(status EQUAL 0 OR NOT output MATCHES "zero probe: all checks passed"
   OR NOT output MATCHES "required component\\(s\\) missing: nosuch: zero has no component 'nosuch'")
  message(FATAL_ERROR "the probe did not fail as it should (${status}), see above")
endif()
lap("components that cannot be had are refused by name")
