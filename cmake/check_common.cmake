# Shared by the install checks (check_package.cmake, check_jax_ffi.cmake, check_torch_op.cmake): a
# fresh temporary folder under the build tree; run(what, command...) that stops the check, removing
# the folder, with the command's output when it fails; and build_example(name, configure args...)
# that installs the build into ${tmp}/prefix and builds examples/<name> against it in ${tmp}/build.
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

function(build_example name)
  run("cmake --install" ${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${tmp}/prefix")
  run("configure examples/${name}" ${CMAKE_COMMAND} -S "${SOURCE_DIR}/examples/${name}" -B "${tmp}/build"
      -G "${GENERATOR}" "-DCMAKE_PREFIX_PATH=${tmp}/prefix" "-DCMAKE_CXX_COMPILER=${CXX}" -DCMAKE_BUILD_TYPE=Release
      ${ARGN})
  run("build examples/${name}" ${CMAKE_COMMAND} --build "${tmp}/build")
endfunction()
