# cmake -DBUILD_DIR=... -DSOURCE_DIR=... -DWORK_DIR=... -DMODE=install|subdirectory -P run_consumer.cmake
# install: installs the build to a prefix, checks that only what a user links or runs went there
# (check_installed_files.cmake), moves the prefix elsewhere (the package must not remember where it
# was installed), then against the moved prefix: builds and runs tests/package/consumer asking for
# no component on a machine where CUDA, MPI and libtorch cannot be found; builds it asking for
# every component zero was built with, and runs the MPI and libtorch programs; and configures
# tests/package/probe, which checks what find_package(zero) says about components it cannot have.
# subdirectory: builds tests/package/subdirectory_consumer, which vendors the source tree. Each step
# prints its time.
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
run(${CMAKE_COMMAND} -DPREFIX=${WORK_DIR}/installed
    -P ${SOURCE_DIR}/tests/package/check_installed_files.cmake)
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
foreach(component mpi:Mpi engines:Engines nvme:Nvme cuda:Cuda torch:Torch)
  string(REPLACE ":" ";" component ${component})
  list(GET component 0 name)
  list(GET component 1 file_name)
  if(EXISTS ${package_dir}/zero${file_name}Targets.cmake)
    list(APPEND zero_built_components ${name})
  endif()
endforeach()
# A build that found libtorch installs the torch component.
file(STRINGS ${BUILD_DIR}/CMakeCache.txt torch_dir REGEX "^Torch_DIR:")
file(STRINGS ${BUILD_DIR}/CMakeCache.txt torch_enabled REGEX "^ZERO_ENABLE_TORCH:BOOL=(ON|TRUE|1)$")
list(FIND zero_built_components torch torch_installed)
if(torch_enabled AND torch_dir AND NOT torch_dir MATCHES "NOTFOUND$" AND torch_installed EQUAL -1)
  message(FATAL_ERROR "zero's build found libtorch (${torch_dir}), but the installed package has "
                      "no torch component (zeroTorchTargets.cmake)")
endif()
lap("installed, moved and checked for absolute paths (built with: ${zero_built_components})")

# A machine without CUDA, MPI or libtorch: no nvcc on PATH, and none of their packages can be found
# (MPI's compiler wrappers stay on PATH beside the C++ compiler, but find_package(MPI) is disabled).
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
    -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON -DCMAKE_DISABLE_FIND_PACKAGE_Torch=ON
    -DCUDAToolkit_ROOT=${WORK_DIR}/no-cuda)
run(${no_cuda} -S ${SOURCE_DIR}/tests/package/consumer -B ${WORK_DIR}/headers
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/headers)
run(${WORK_DIR}/headers/consumer)
lap("zero::zero consumer built and run without CUDA, MPI or libtorch")

string(REPLACE ";" "," components "config;${zero_built_components}")
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/package/consumer -B ${WORK_DIR}/components
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release -DZERO_COMPONENTS=${components})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/components --parallel 2)
# The trainer that names a prebuilt engine compiles none of it: its object defines no member of
# the engine or its stores (they are libzero_engines.a's).
list(FIND zero_built_components engines engines_installed)
if(NOT engines_installed EQUAL -1)
  file(GLOB_RECURSE object ${WORK_DIR}/components/CMakeFiles/consumer_engines.dir/*.o)
  execute_process(COMMAND nm --defined-only --format=just-symbols ${object}
                  OUTPUT_VARIABLE symbols RESULT_VARIABLE status)
  # Members of those classes by their mangled names (zero::avx2::Engine<...>::step() is
  # _ZN4zero4avx26EngineI...): not the functions that only take an engine as an argument.
  string(REPLACE "\n" ";" symbols "${symbols}")
  set(compiled "")
  foreach(symbol IN LISTS symbols)
    if(symbol MATCHES "^_ZNK?4zero([0-9]+[a-z0-9_]+)?(6Engine|11ModelStates|11TypedStates|13GradientStore|14OptimizerStore|15BucketedReducer|15ParameterGather)I")
      list(APPEND compiled ${symbol})
    endif()
  endforeach()
  if(NOT status EQUAL 0 OR compiled)
    message(FATAL_ERROR "consumer_engines compiled engine code it should have linked (nm ${status}): ${compiled}")
  endif()
endif()
foreach(program consumer_mpi consumer_engines consumer_torch)
  if(EXISTS ${WORK_DIR}/components/${program})
    run(${WORK_DIR}/components/${program})
  endif()
endforeach()
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
