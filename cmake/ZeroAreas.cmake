# zero_add_areas(<prefix> [EXCLUDE folder...]): adds every sub-folder of the current folder that has
# a CMakeLists.txt. The cache variable <prefix>_AREAS ("all", or a list of folder names) lets
# developers build only some areas, e.g. -DZERO_TEST_AREAS="core;comm", and
# <prefix>_EXCLUDED_AREAS leaves some out (the sanitize preset: fuzz, which the fuzz preset runs).
function(zero_add_areas prefix)
  cmake_parse_arguments(arg "" "" "EXCLUDE" ${ARGN})
  set(${prefix}_AREAS all CACHE STRING "Folders of ${CMAKE_CURRENT_SOURCE_DIR} to build (all, or a list)")
  set(${prefix}_EXCLUDED_AREAS "" CACHE STRING "Folders of ${CMAKE_CURRENT_SOURCE_DIR} not to build")
  list(APPEND arg_EXCLUDE ${${prefix}_EXCLUDED_AREAS})
  file(GLOB areas LIST_DIRECTORIES true RELATIVE ${CMAKE_CURRENT_SOURCE_DIR} CONFIGURE_DEPENDS
       ${CMAKE_CURRENT_SOURCE_DIR}/*)
  foreach(area IN LISTS areas)
    if(area IN_LIST arg_EXCLUDE OR NOT IS_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/${area}
       OR NOT EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/${area}/CMakeLists.txt)
      continue()
    endif()
    if(${prefix}_AREAS STREQUAL "all" OR area IN_LIST ${prefix}_AREAS)
      add_subdirectory(${area})
    endif()
  endforeach()
endfunction()
