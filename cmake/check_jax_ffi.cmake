# The JAX FFI test (ctest: jax.ffi_attention): installs the build into a temporary prefix, builds
# examples/jax (Palladium's attention as an XLA FFI handler) against it and the jaxlib headers of
# the test venv, and runs examples/jax/attention_from_jax.py with that venv's Python. Without a
# venv it prints "no JAX venv: skipped" (ctest counts that as skipped) unless PALLADIUM_REQUIRE_JAX
# is set.
#   cmake -DBUILD_DIR=... -DSOURCE_DIR=... -DGENERATOR=... -DCXX=... -P check_jax_ffi.cmake
if(DEFINED ENV{PALLADIUM_JAX_PYTHON} AND NOT "$ENV{PALLADIUM_JAX_PYTHON}" STREQUAL "")
  set(python "$ENV{PALLADIUM_JAX_PYTHON}")
elseif(EXISTS "${BUILD_DIR}/jax-venv/bin/python")
  set(python "${BUILD_DIR}/jax-venv/bin/python")
elseif(DEFINED ENV{PALLADIUM_REQUIRE_JAX})
  message(FATAL_ERROR "no JAX venv (tools/setup_jax_venv.sh makes one)")
else()
  message(STATUS "no JAX venv: skipped")
  return()
endif()
set(CHECK_NAME jax-ffi-check)
include(${CMAKE_CURRENT_LIST_DIR}/check_common.cmake)

# jax.ffi since JAX 0.4.38; jax.extend.ffi before (and gone in later releases).
execute_process(COMMAND "${python}" -c
                "import jax\ntry:\n f = jax.ffi\nexcept AttributeError:\n import jax.extend as je\n f = je.ffi\nprint(f.include_dir())"
                OUTPUT_VARIABLE include_dir OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the venv's jax has neither jax.ffi.include_dir() nor jax.extend.ffi.include_dir()")
endif()
build_example(jax "-DJAXLIB_INCLUDE_DIR=${include_dir}")
run("attention from JAX" "${python}" "${SOURCE_DIR}/examples/jax/attention_from_jax.py" "${tmp}/build/libpalladium_jax.so")
file(REMOVE_RECURSE "${tmp}")
