# The MPI wrappers msgpass-mpicc and msgpass-mpicxx and the pkg-config file
# msgpass-mpi.pc (docs/mpi.md). Included by the top-level CMakeLists.txt once the
# -l flags of msgpass.pc are known (MSGPASS_PC_LIBS).
#
# Installed: bin/msgpass-mpicc, bin/msgpass-mpicxx find the prefix from their own place,
# so that the prefix may move, and lib/pkgconfig/msgpass-mpi.pc from ${pcfiledir}.
# In the build tree: ${PROJECT_BINARY_DIR}/bin/msgpass-mpicc and -mpicxx name the
# libraries of this build by path, with its sanitizer flags (tests/mpi builds with it).

set(msgpass_mpi_default_cc cc)
if(CMAKE_C_COMPILER)
  set(msgpass_mpi_default_cc ${CMAKE_C_COMPILER})
endif()
# A C program links C++ libraries: the C++ runtime by hand (cc does not add it).
set(msgpass_mpi_runtime "-lstdc++ -lm")

# configure one wrapper: out, wrapper name, language (C or CXX), locate, compile, link
function(msgpass_mpi_wrapper out wrapper language locate compile link)
  set(WRAPPER ${wrapper})
  set(LOCATE "${locate}")
  set(COMPILE_FLAGS "${compile}")
  set(LINK_FLAGS "${link}")
  if(language STREQUAL "C")
    set(LANGUAGE_NAME C)
    set(MPI_NAME mpicc)
    set(SUFFIX .c)
    set(COMPILER_VARIABLE MSGPASS_MPICC_CC)
    set(DEFAULT_COMPILER ${msgpass_mpi_default_cc})
  else()
    set(LANGUAGE_NAME C++)
    set(MPI_NAME mpicxx)
    set(SUFFIX .cpp)
    set(COMPILER_VARIABLE MSGPASS_MPICXX_CXX)
    set(DEFAULT_COMPILER ${CMAKE_CXX_COMPILER})
  endif()
  configure_file(${PROJECT_SOURCE_DIR}/mpi/wrapper.in ${out} @ONLY)
endfunction()

# Installed.
file(RELATIVE_PATH msgpass_bin_to_prefix ${CMAKE_INSTALL_FULL_BINDIR} ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" msgpass_bin_to_prefix "${msgpass_bin_to_prefix}")
if(msgpass_bin_to_prefix STREQUAL "")
  set(msgpass_bin_to_prefix .)
endif()
set(msgpass_mpi_locate "prefix=$(CDPATH='' cd -- \"$(dirname -- \"$0\")/${msgpass_bin_to_prefix}\" && pwd)")
set(msgpass_mpi_includedir "\$prefix/${CMAKE_INSTALL_INCLUDEDIR}")
set(msgpass_mpi_libdir "\$prefix/${CMAKE_INSTALL_LIBDIR}")
if(BUILD_SHARED_LIBS)
  # libmsgpass_mpi.so brings the others; the RUNPATH lets the program find it.
  set(msgpass_mpi_installed_link "-L${msgpass_mpi_libdir} -Wl,-rpath,${msgpass_mpi_libdir} -lmsgpass_mpi -pthread")
else()
  set(msgpass_mpi_installed_link "-L${msgpass_mpi_libdir} -lmsgpass_mpi ${MSGPASS_PC_LIBS} -lyaml-cpp -lsodium ${msgpass_mpi_runtime}")
endif()
set(msgpass_mpi_installed_compile "-I${msgpass_mpi_includedir}/msgpass/mpi")
foreach(language C CXX)
  set(name msgpass-mpicc)
  if(language STREQUAL "CXX")
    set(name msgpass-mpicxx)
  endif()
  msgpass_mpi_wrapper(${CMAKE_CURRENT_BINARY_DIR}/mpi/installed/${name} ${name} ${language} "${msgpass_mpi_locate}"
    "${msgpass_mpi_installed_compile}" "${msgpass_mpi_installed_link}")
  install(PROGRAMS ${CMAKE_CURRENT_BINARY_DIR}/mpi/installed/${name} DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT dev)
endforeach()

# pkg-config msgpass-mpi: C flags only (msgpass.pc's -std=c++20 is not for C).
if(BUILD_SHARED_LIBS)
  set(MSGPASS_MPI_PC_LIBS "-lmsgpass_mpi -pthread")
  set(MSGPASS_MPI_PC_LIBS_PRIVATE "Libs.private: ${MSGPASS_PC_LIBS} ${msgpass_pc_technologies} -lboost_program_options -lrt ${msgpass_mpi_runtime}")
  set(MSGPASS_MPI_PC_REQUIRES "Requires.private: yaml-cpp, libsodium")
else()
  set(MSGPASS_MPI_PC_LIBS "-lmsgpass_mpi ${MSGPASS_PC_LIBS} ${msgpass_mpi_runtime}")
  set(MSGPASS_MPI_PC_LIBS_PRIVATE "")
  set(MSGPASS_MPI_PC_REQUIRES "Requires: yaml-cpp, libsodium")
endif()
configure_file(${PROJECT_SOURCE_DIR}/mpi/msgpass-mpi.pc.in ${CMAKE_CURRENT_BINARY_DIR}/msgpass-mpi.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/msgpass-mpi.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)

# The build tree's wrappers: the libraries of this build by path, in link order.
set(msgpass_mpi_tree_link "")
foreach(component mpi comm msgpass auto sci tcp udp ip framework config)
  string(APPEND msgpass_mpi_tree_link " $<TARGET_FILE:msgpass_${component}>")
  if(BUILD_SHARED_LIBS)
    string(APPEND msgpass_mpi_tree_link " -Wl,-rpath,$<TARGET_FILE_DIR:msgpass_${component}>")
  endif()
endforeach()
string(APPEND msgpass_mpi_tree_link " -lyaml-cpp -lsodium -lboost_program_options -lrt -pthread ${msgpass_mpi_runtime}")
set(msgpass_mpi_tree_compile "-I${PROJECT_SOURCE_DIR}/mpi/include/msgpass/mpi")
if(MSGPASS_SANITIZE)
  string(APPEND msgpass_mpi_tree_compile " -fsanitize=${MSGPASS_SANITIZE} -fno-omit-frame-pointer")
  string(APPEND msgpass_mpi_tree_link " -fsanitize=${MSGPASS_SANITIZE}")
endif()
foreach(language C CXX)
  set(name msgpass-mpicc)
  if(language STREQUAL "CXX")
    set(name msgpass-mpicxx)
  endif()
  msgpass_mpi_wrapper(${CMAKE_CURRENT_BINARY_DIR}/mpi/tree/${name}.in ${name} ${language} ""
    "${msgpass_mpi_tree_compile}" "${msgpass_mpi_tree_link}")
  file(GENERATE OUTPUT ${PROJECT_BINARY_DIR}/bin/${name} INPUT ${CMAKE_CURRENT_BINARY_DIR}/mpi/tree/${name}.in
    FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
endforeach()
