# `cmake --build <dir> --target format-check` fails when a C++ file does not follow .clang-format;
# `--target format` rewrites them.
find_program(ZERO_CLANG_FORMAT NAMES clang-format clang-format-14)
if(ZERO_CLANG_FORMAT)
  file(GLOB_RECURSE zero_format_files CONFIGURE_DEPENDS
       ${PROJECT_SOURCE_DIR}/include/*.hpp ${PROJECT_SOURCE_DIR}/src/*.cu ${PROJECT_SOURCE_DIR}/src/*.cuh
       ${PROJECT_SOURCE_DIR}/tests/*.cpp ${PROJECT_SOURCE_DIR}/tests/*.hpp ${PROJECT_SOURCE_DIR}/tests/*.cu
       ${PROJECT_SOURCE_DIR}/bench/*.cpp ${PROJECT_SOURCE_DIR}/tools/*.cpp ${PROJECT_SOURCE_DIR}/examples/*.cpp
       ${PROJECT_SOURCE_DIR}/examples/*.hpp ${PROJECT_SOURCE_DIR}/support/*.hpp
       ${PROJECT_SOURCE_DIR}/docs/*.cpp)
  add_custom_target(format-check
    COMMAND ${ZERO_CLANG_FORMAT} --dry-run --Werror ${zero_format_files}
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR} COMMENT "Checking clang-format" VERBATIM)
  add_custom_target(format
    COMMAND ${ZERO_CLANG_FORMAT} -i ${zero_format_files}
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR} COMMENT "Running clang-format" VERBATIM)
endif()
