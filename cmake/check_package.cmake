# The package test (ctest: package.install_and_consume): installs the build into a fresh temporary
# prefix, builds examples/consumer against it with find_package(Palladium), and again with only
# pkg-config's flags, runs both, and removes the folder. Run with
#   cmake -DBUILD_DIR=... -DSOURCE_DIR=... -DGENERATOR=... -DCXX=... -P check_package.cmake
set(CHECK_NAME package-check)
include(${CMAKE_CURRENT_LIST_DIR}/check_common.cmake)

build_example(consumer)
run("run the consumer" "${tmp}/build/consumer")

find_program(PKG_CONFIG pkg-config)
if(PKG_CONFIG)
  file(GLOB_RECURSE pc_files "${tmp}/prefix/*/palladium.pc")
  list(GET pc_files 0 pc_file)
  get_filename_component(pc_dir "${pc_file}" DIRECTORY)
  set(ENV{PKG_CONFIG_PATH} "${pc_dir}")
  execute_process(COMMAND ${PKG_CONFIG} --cflags --libs palladium OUTPUT_VARIABLE flags RESULT_VARIABLE rc
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT rc EQUAL 0)
    file(REMOVE_RECURSE "${tmp}")
    message(FATAL_ERROR "pkg-config does not know palladium")
  endif()
  separate_arguments(flags UNIX_COMMAND "${flags}")
  run("build with pkg-config" "${CXX}" -O1 "${SOURCE_DIR}/examples/consumer/main.cc" -o "${tmp}/consumer_pc" ${flags})
  run("run the pkg-config build" "${tmp}/consumer_pc")
endif()
file(REMOVE_RECURSE "${tmp}")
