# cmake --install <build> --prefix <prefix> puts:
#   include/palladium/...           the public headers (and include/palladium/ops/: the kernel library's)
#   lib/libpalladium.a
#   lib/cmake/Palladium/            PalladiumConfig.cmake, its version file and exported targets
#   lib/pkgconfig/palladium.pc      for builds without CMake
include(CMakePackageConfigHelpers)

install(TARGETS palladium EXPORT PalladiumTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/palladium DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_SOURCE_DIR}/ops/attention.h ${PROJECT_SOURCE_DIR}/ops/indrnn.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/palladium/ops)

set(PL_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/Palladium)
install(EXPORT PalladiumTargets NAMESPACE Palladium:: DESTINATION ${PL_CMAKE_DIR})
set(PALLADIUM_WITH_MPI ${MPI_CXX_FOUND})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/PalladiumConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/PalladiumConfig.cmake INSTALL_DESTINATION ${PL_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/PalladiumConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/PalladiumConfig.cmake ${PROJECT_BINARY_DIR}/PalladiumConfigVersion.cmake
        DESTINATION ${PL_CMAKE_DIR})

if(MPI_CXX_FOUND)
  set(PL_PC_REQUIRES "Requires: ompi-cxx")
endif()
file(RELATIVE_PATH PL_PC_UP "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")  # "../.." for lib/pkgconfig
configure_file(${PROJECT_SOURCE_DIR}/cmake/palladium.pc.in ${PROJECT_BINARY_DIR}/palladium.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/palladium.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
