# Shared by the install checks (check_package.cmake, check_jax_ffi.cmake): a fresh temporary folder
# under the build tree, and run(what, command...) that stops the check, removing the folder, with
# the command's output when it fails.
string(RANDOM LENGTH 10 check_tag)
set(tmp "${BUILD_DIR}/${CHECK_NAME}-${check_tag}")

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    file(REMOVE_RECURSE "${tmp}")
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
  message(STATUS "${what}: ok\n${out}")
endfunction()
