# Debian packages of this build (`cpack -G DEB` in the build directory;
# scripts/packages.sh configures a build for them and checks the result). Three
# packages from the install components:
#   libmsgpass<SOVERSION>  (component libs)  the shared libraries, named after their
#                          SONAME (libmsgpass_*.so.<SOVERSION>), as Debian's policy
#                          names library packages, so that two ABIs can be installed
#                          side by side;
#   libmsgpass-dev         (component dev)   headers, the .so links, static libraries
#                          if built, the CMake package, msgpass.pc, msgpass-mpi.pc and
#                          the MPI compiler wrappers (msgpass-mpicc, msgpass-mpicxx:
#                          they need the headers, as Debian's libopenmpi-dev ships
#                          mpicc);
#   msgpass-tools          (component tools) msgpass-run, msgpass-bench, msgpass-top,
#                          the example programs with their files, the man pages.
# The libraries' and programs' dependencies on Debian's libraries are found by
# dpkg-shlibdeps; the -dev package depends on the -dev packages its headers and CMake
# package need.
set(msgpass_deb_libs libmsgpass${MSGPASS_SOVERSION})
set(msgpass_deb_version ${PROJECT_VERSION})

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME msgpass)
set(CPACK_PACKAGE_VERSION ${msgpass_deb_version})
set(CPACK_PACKAGE_CONTACT "msgpass developers <msgpass-dev@lists.example.org>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_PACKAGE_HOMEPAGE_URL "https://example.org/msgpass")
set(CPACK_STRIP_FILES ON)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL libs dev tools)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# Our own libraries, for dpkg-shlibdeps to resolve the programs' dependencies on
# them (they are not installed on the machine that builds the packages).
set(msgpass_deb_private_dirs "")
foreach(dir framework config sci ip/common ip/tcp ip/udp auto umbrella comm mpi)
  list(APPEND msgpass_deb_private_dirs ${PROJECT_BINARY_DIR}/${dir})
endforeach()
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${msgpass_deb_private_dirs})
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY "=")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)

set(CPACK_DEBIAN_LIBS_PACKAGE_NAME ${msgpass_deb_libs})
set(CPACK_DEBIAN_LIBS_PACKAGE_SECTION libs)
# The dynamic linker's cache is refreshed by dpkg's ldconfig trigger (Debian policy
# 8.1.1); cpack's own postinst also runs ldconfig, which lintian only warns about.
file(WRITE ${PROJECT_BINARY_DIR}/debian-libs/triggers "activate-noawait ldconfig\n")
set(CPACK_DEBIAN_LIBS_PACKAGE_CONTROL_EXTRA ${PROJECT_BINARY_DIR}/debian-libs/triggers)
set(CPACK_COMPONENT_LIBS_DESCRIPTION
  "message passing for trigger and DAQ systems (shared libraries)\n"
  "msgpass moves event fragments between the processes of a data-acquisition\n"
  "partition through four classes (Buffer, Node, Group, NodeFactory) over shared\n"
  "memory (sci), TCP and UDP, configured by YAML files.\n"
  "This package holds the shared libraries.")

set(CPACK_DEBIAN_DEV_PACKAGE_NAME libmsgpass-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS
  "${msgpass_deb_libs} (= ${msgpass_deb_version}), libboost-dev, libboost-program-options-dev, libyaml-cpp-dev, libsodium-dev, pkg-config")
set(CPACK_COMPONENT_DEV_DESCRIPTION
  "message passing for trigger and DAQ systems (development files)\n"
  "msgpass moves event fragments between the processes of a data-acquisition\n"
  "partition over shared memory (sci), TCP and UDP.\n"
  "This package holds the headers, the CMake package for find_package, the\n"
  "pkg-config files and the MPI compiler wrappers msgpass-mpicc and\n"
  "msgpass-mpicxx.")

set(CPACK_DEBIAN_TOOLS_PACKAGE_NAME msgpass-tools)
set(CPACK_DEBIAN_TOOLS_PACKAGE_SECTION net)
set(CPACK_DEBIAN_TOOLS_PACKAGE_DEPENDS "${msgpass_deb_libs} (= ${msgpass_deb_version})")
set(CPACK_COMPONENT_TOOLS_DESCRIPTION
  "message passing for trigger and DAQ systems (programs)\n"
  "msgpass moves event fragments between the processes of a data-acquisition\n"
  "partition over shared memory (sci), TCP and UDP.\n"
  "This package holds the launcher msgpass-run, the benchmark msgpass-bench,\n"
  "the live view msgpass-top and the example programs (a DAQ partition, a\n"
  "token ring).")

# Each package's /usr/share/doc/<package>: copyright and a Debian changelog (gzip -n,
# so that the package is the same whenever it is built).
find_program(MSGPASS_GZIP gzip)
set(msgpass_doc ${PROJECT_BINARY_DIR}/debian-doc)
file(MAKE_DIRECTORY ${msgpass_doc})
file(WRITE ${msgpass_doc}/copyright
  "msgpass: message passing for trigger and DAQ systems\n\n"
  "Copyright 2026 the msgpass developers <msgpass-dev@lists.example.org>\n\n"
  "The sources are those of the msgpass tree this package was built from; the\n"
  "project has not published a licence for them yet.\n")
string(TIMESTAMP msgpass_deb_date "%a, %d %b %Y %H:%M:%S +0000" UTC)
file(WRITE ${msgpass_doc}/changelog
  "msgpass (${msgpass_deb_version}) unstable; urgency=medium\n\n"
  "  * Built by cpack from the msgpass tree (docs/operations.md).\n\n"
  " -- msgpass developers <msgpass-dev@lists.example.org>  ${msgpass_deb_date}\n")
if(MSGPASS_GZIP)
  add_custom_command(OUTPUT ${msgpass_doc}/changelog.gz
    COMMAND ${MSGPASS_GZIP} -9nc ${msgpass_doc}/changelog > ${msgpass_doc}/changelog.gz
    DEPENDS ${msgpass_doc}/changelog VERBATIM)
  add_custom_target(msgpass-debian-changelog ALL DEPENDS ${msgpass_doc}/changelog.gz)
  foreach(component libs dev tools)
    string(TOUPPER ${component} upper)
    install(FILES ${msgpass_doc}/copyright ${msgpass_doc}/changelog.gz
      DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/${CPACK_DEBIAN_${upper}_PACKAGE_NAME} COMPONENT ${component}
      EXCLUDE_FROM_ALL)
  endforeach()
endif()

include(CPack)
