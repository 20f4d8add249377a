# Installation and the exported CMake package:
#   find_package(ember) ; target_link_libraries(app ember::ember) ; #include <ember/ember.h>
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# With CUDA, the plugin libember_cuda beside libember, which loads it from
# its own folder (Note [CUDA backend plugin] in core/README.md); it is
# exported as ember::cuda for programs with CUDA code of their own.
set(ember_libraries ember)
if(EMBER_WITH_CUDA)
  list(APPEND ember_libraries ember_cuda)
endif()
install(TARGETS ${ember_libraries} EXPORT emberTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# Headers keep their layer paths under include/ember, so "core/tensor.h"
# resolves the same way installed as in the source tree.
foreach(layer IN LISTS EMBER_ALL_LAYERS)
  if(EXISTS ${PROJECT_SOURCE_DIR}/${layer})
    install(DIRECTORY ${PROJECT_SOURCE_DIR}/${layer}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ember/${layer}
            FILES_MATCHING PATTERN "*.h")
  endif()
endforeach()
install(FILES ${PROJECT_SOURCE_DIR}/ember/ember.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ember)

install(EXPORT emberTargets NAMESPACE ember:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ember)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/emberConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/emberConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ember)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/emberConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/emberConfig.cmake ${PROJECT_BINARY_DIR}/emberConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ember)
