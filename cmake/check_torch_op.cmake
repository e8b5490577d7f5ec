# The PyTorch custom-op test (ctest: torch.custom_op_attention): installs the build into a
# temporary prefix, builds examples/torch against it and runs examples/torch/attention_from_torch.py
# with a Python that has torch (PALLADIUM_TORCH_PYTHON, else python3), on the CPU and, where torch
# sees one, on the GPU. Without torch it prints "no torch: skipped" (ctest counts that as skipped)
# unless PALLADIUM_REQUIRE_TORCH is set.
#   cmake -DBUILD_DIR=... -DSOURCE_DIR=... -DGENERATOR=... -DCXX=... -P check_torch_op.cmake
if(DEFINED ENV{PALLADIUM_TORCH_PYTHON} AND NOT "$ENV{PALLADIUM_TORCH_PYTHON}" STREQUAL "")
  set(python "$ENV{PALLADIUM_TORCH_PYTHON}")
else()
  set(python python3)
endif()
execute_process(COMMAND "${python}" -c "import torch; print('cuda' if torch.cuda.is_available() else '')"
                OUTPUT_VARIABLE gpu OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc ERROR_QUIET)
if(NOT rc EQUAL 0)
  if(DEFINED ENV{PALLADIUM_REQUIRE_TORCH})
    message(FATAL_ERROR "'${python}' cannot import torch (set PALLADIUM_TORCH_PYTHON)")
  endif()
  message(STATUS "no torch: skipped")
  return()
endif()
set(CHECK_NAME torch-op-check)
include(${CMAKE_CURRENT_LIST_DIR}/check_common.cmake)
build_example(torch)
run("attention from torch" "${python}" "${SOURCE_DIR}/examples/torch/attention_from_torch.py"
    "${tmp}/build/libpalladium_torch.so" cpu ${gpu})
file(REMOVE_RECURSE "${tmp}")
