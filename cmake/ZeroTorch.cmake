# The PyTorch comparisons run Debian's python3 with python3-torch and numpy (tools/install-dependencies
# --test installs them). zero_find_torch_python() sets ZERO_TORCH_PYTHON to that interpreter when it
# imports both, and to an empty string otherwise. With ZERO_REQUIRE_TORCH (the README's test command,
# tools/zero-test, sets it) not finding them fails the configuration: a run that should compare
# with PyTorch never drops those tests quietly.
option(ZERO_REQUIRE_TORCH "Fail the configuration when the PyTorch comparison tests cannot run" OFF)

function(zero_find_torch_python)
  get_property(checked GLOBAL PROPERTY zero_torch_python SET)
  if(checked) # once per configuration: importing torch takes seconds
    get_property(found GLOBAL PROPERTY zero_torch_python)
    set(ZERO_TORCH_PYTHON "${found}" PARENT_SCOPE)
    return()
  endif()
  find_program(zero_system_python3 NAMES python3 PATHS /usr/bin NO_DEFAULT_PATH)
  set(found "")
  set(reason "no python3 in /usr/bin")
  if(zero_system_python3)
    execute_process(COMMAND ${zero_system_python3} -c "import torch, numpy"
                    RESULT_VARIABLE status OUTPUT_QUIET ERROR_VARIABLE error)
    if(status EQUAL 0)
      set(found ${zero_system_python3})
    else()
      string(STRIP "${error}" error)
      string(REGEX REPLACE ".*\n" "" reason "${error}")
    endif()
  endif()
  if(NOT found)
    if(ZERO_REQUIRE_TORCH)
      message(FATAL_ERROR "zero: the PyTorch comparison tests cannot run (${reason}); run "
                          "tools/install-dependencies --test, or configure without ZERO_REQUIRE_TORCH")
    endif()
    message(STATUS "zero: python3-torch not found (${reason}); the PyTorch comparison tests are not registered")
  endif()
  set_property(GLOBAL PROPERTY zero_torch_python "${found}")
  set(ZERO_TORCH_PYTHON "${found}" PARENT_SCOPE)
endfunction()
