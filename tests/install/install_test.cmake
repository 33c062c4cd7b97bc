# The installed package works for a user outside the tree and for a distribution
# (cmake -P script, run by ctest), for one kind of libraries, KIND = static or shared:
#
# - installs into a fresh prefix the current build when it is of that kind, else a
#   second build of the tree with BUILD_SHARED_LIBS of that kind (tests off, -O0, no
#   sanitizers, so that it stays short);
# - checks the libraries: libmsgpass*.a, or libmsgpass*.so with the SONAME
#   lib<name>.so.SOVERSION and the file lib<name>.so.VERSION; none for the header-only
#   msgpass::base;
# - checks the programs (every file in bin/ is msgpass-*) and their man pages (a .TH
#   header, and groff or man renders the page with the program's options);
# - builds tests/install/outside against the prefix with find_package(msgpass CONFIG)
#   and again with pkg-config's flags alone, runs both and checks that each links
#   libmsgpass of this kind;
# - runs the DAQ example from the installed tree alone: the installed msgpass-run,
#   msgpass-daq and share/msgpass/examples/daq, in a clean environment (no
#   LD_LIBRARY_PATH: installed programs find shared libraries through their RUNPATH);
# - builds tests/mpi/pingpong.c with the installed msgpass-mpicc, with pkg-config
#   msgpass-mpi and with find_package(msgpass) and msgpass::mpi (tests/install/
#   outside-mpi), and runs each with the installed msgpass-run -n 2.
#
# Sanitizer flags of the current build are passed on to the outside project, since
# its static libraries carry sanitizer references. The temporary directory is
# removed whatever the outcome.
#
# Inputs (-D): KIND, TREE_KIND (the kind of BUILD_DIR), BUILD_DIR, TREE_SOURCE (the
# msgpass sources), OUTSIDE (the outside project), GENERATOR, CXX, BUILD_TYPE,
# SANITIZE (as MSGPASS_SANITIZE, may be empty), APPS (the build has the programs),
# MAN_PAGES (the build has their man pages), VERSION, SOVERSION, RUN_EXAMPLE
# (run_example.sh), DAQ_EXPECTED (the line the DAQ example must print).
cmake_minimum_required(VERSION 3.25)

foreach(var KIND TREE_KIND BUILD_DIR TREE_SOURCE OUTSIDE GENERATOR CXX VERSION SOVERSION RUN_EXAMPLE DAQ_EXPECTED)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "install_test.cmake: -D${var}= is required")
  endif()
endforeach()
if(NOT KIND MATCHES "^(static|shared)$" OR NOT TREE_KIND MATCHES "^(static|shared)$")
  message(FATAL_ERROR "install_test.cmake: KIND and TREE_KIND are static or shared, found '${KIND}', '${TREE_KIND}'")
endif()

string(RANDOM LENGTH 12 suffix)
set(tmp "${BUILD_DIR}/install-test-${KIND}-${suffix}")
file(REMOVE_RECURSE "${tmp}")
file(MAKE_DIRECTORY "${tmp}")
set(prefix "${tmp}/prefix")

function(fail what)
  file(REMOVE_RECURSE "${tmp}")
  message(FATAL_ERROR "${KIND} package: ${what}")
endfunction()

# Runs a command; on failure removes the temporary directory and stops with its output.
function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    fail("${what} failed (${rc}):\n${out}\n${err}")
  endif()
  set(run_output "${out}" PARENT_SCOPE)
  set(run_error "${err}" PARENT_SCOPE)
endfunction()

find_program(READELF readelf)
if(NOT READELF)
  fail("readelf (binutils) is not installed")
endif()
# The shared libraries a file needs (NEEDED entries), and its SONAME.
function(elf_dynamic file)
  run("readelf -d ${file}" "${READELF}" -d "${file}")
  string(REGEX MATCHALL "Shared library: \\[[^]]+\\]" needed "${run_output}")
  string(REGEX REPLACE "Shared library: \\[([^]]+)\\]" "\\1" needed "${needed}")
  set(soname "")
  if(run_output MATCHES "Library soname: \\[([^]]+)\\]")
    set(soname "${CMAKE_MATCH_1}")
  endif()
  set(elf_needed "${needed}" PARENT_SCOPE)
  set(elf_soname "${soname}" PARENT_SCOPE)
endfunction()

# The tree to install: the current build, or a build of the other kind.
if(KIND STREQUAL TREE_KIND)
  set(tree "${BUILD_DIR}")
  set(flags "")
  if(SANITIZE)
    set(flags "-fsanitize=${SANITIZE} -fno-omit-frame-pointer")
  endif()
  set(outside_build_type "${BUILD_TYPE}")
else()
  set(tree "${tmp}/tree")
  set(shared OFF)
  if(KIND STREQUAL "shared")
    set(shared ON)
  endif()
  run("configure the tree with BUILD_SHARED_LIBS=${shared}" "${CMAKE_COMMAND}" -S "${TREE_SOURCE}" -B "${tree}"
    -G "${GENERATOR}" "-DCMAKE_CXX_COMPILER=${CXX}" -DBUILD_SHARED_LIBS=${shared} -DMSGPASS_BUILD_TESTS=OFF
    -DMSGPASS_BUILD_APPS=ON -DMSGPASS_SANITIZE= -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-O0)
  run("build the tree with BUILD_SHARED_LIBS=${shared}" "${CMAKE_COMMAND}" --build "${tree}" --parallel 2)
  set(flags "")
  set(APPS ON)
  set(outside_build_type Debug)
endif()

run("cmake --install" "${CMAKE_COMMAND}" --install "${tree}" --prefix "${prefix}")

# The library directory is the one of msgpass.pc (lib, lib64 or lib/<triplet>).
file(GLOB_RECURSE pc_file "${prefix}/msgpass.pc")
if(NOT pc_file)
  fail("no msgpass.pc under ${prefix}")
endif()
list(GET pc_file 0 pc_file)
get_filename_component(pc_dir "${pc_file}" DIRECTORY)
get_filename_component(libdir "${pc_dir}" DIRECTORY)

# The libraries, of this kind only.
foreach(name msgpass msgpass_config msgpass_framework msgpass_sci msgpass_ip msgpass_tcp msgpass_udp msgpass_auto msgpass_comm
        msgpass_mpi)
  set(archive "${libdir}/lib${name}.a")
  set(link "${libdir}/lib${name}.so")
  if(KIND STREQUAL "static")
    if(NOT EXISTS "${archive}" OR EXISTS "${link}")
      fail("expected ${archive} and no ${link}")
    endif()
  else()
    if(EXISTS "${archive}")
      fail("a shared build installed ${archive}")
    endif()
    foreach(file "${link}" "${link}.${SOVERSION}" "${link}.${VERSION}")
      if(NOT EXISTS "${file}")
        fail("${file} is not installed")
      endif()
    endforeach()
    elf_dynamic("${link}.${VERSION}")
    if(NOT elf_soname STREQUAL "lib${name}.so.${SOVERSION}")
      fail("${link}.${VERSION} has the SONAME '${elf_soname}', expected lib${name}.so.${SOVERSION}")
    endif()
  endif()
endforeach()
file(GLOB header_only_libraries "${libdir}/libmsgpass_base*")
if(header_only_libraries)
  fail("the header-only msgpass::base has library files: ${header_only_libraries}")
endif()

if(APPS)
  # Every program carries the msgpass- prefix.
  file(GLOB programs RELATIVE "${prefix}/bin" "${prefix}/bin/*")
  list(SORT programs)
  set(expected_programs msgpass-bench msgpass-comm-ring msgpass-comm-server msgpass-daq msgpass-mpicc msgpass-mpicxx msgpass-run msgpass-token-ring msgpass-top)
  if(NOT programs STREQUAL expected_programs)
    fail("bin/ holds '${programs}', expected '${expected_programs}'")
  endif()

  if(MAN_PAGES)
    find_program(GROFF groff)
    find_program(MAN man)
    foreach(program msgpass-run msgpass-bench msgpass-top)
      set(page "${prefix}/share/man/man1/${program}.1")
      if(NOT EXISTS "${page}")
        fail("the man page ${page} is not installed")
      endif()
      file(STRINGS "${page}" th REGEX "^\\.TH ")
      string(TOUPPER "${program}" upper)
      if(NOT th MATCHES "^\\.TH ${upper} \"1\" ")
        fail("${page} has no .TH ${upper} \"1\" header (found '${th}')")
      endif()
      # The page as a reader sees it: its NAME line and an option of --help.
      if(GROFF)
        run("groff -man -ww ${page}" "${GROFF}" -man -Tascii -ww -P-c -P-b -P-o -P-u "${page}")
        if(NOT run_error STREQUAL "")
          fail("groff warns about ${page}:\n${run_error}")
        endif()
      elseif(MAN)
        run("man -l ${page}" "${CMAKE_COMMAND}" -E env LC_ALL=C MANWIDTH=80 "${MAN}" -l "${page}")
      else()
        message(STATUS "neither groff nor man is installed: checked the .TH header of ${page} only")
        continue()
      endif()
      if(NOT run_output MATCHES "NAME\n +${program} +- " OR NOT run_output MATCHES "\n +--set KEY=VALUE\n")
        fail("${page} renders without its NAME line or its --set option:\n${run_output}")
      endif()
    endforeach()
  endif()
endif()

# The same program from find_package(msgpass CONFIG REQUIRED), as README.md shows,
# and from pkg-config's flags alone; each links libmsgpass of this kind.
set(expected "^msgpass outside: fragments=2 size=32 nodes=2 technology=sci\n$")
function(check_outside what program)
  run("run the ${what} build" ${ARGN} "${program}")
  if(NOT run_output MATCHES "${expected}")
    fail("the ${what} build printed:\n${run_output}\nexpected a line matching ${expected}")
  endif()
  elf_dynamic("${program}")
  if(KIND STREQUAL "shared" AND NOT "libmsgpass.so.${SOVERSION}" IN_LIST elf_needed)
    fail("the ${what} build needs '${elf_needed}', not libmsgpass.so.${SOVERSION}")
  elseif(KIND STREQUAL "static" AND elf_needed MATCHES "libmsgpass")
    fail("the ${what} build of the static package needs '${elf_needed}'")
  endif()
endfunction()

set(build_type_arg "")
if(outside_build_type)
  set(build_type_arg "-DCMAKE_BUILD_TYPE=${outside_build_type}")
endif()
run("configure the outside project" "${CMAKE_COMMAND}" -S "${OUTSIDE}" -B "${tmp}/build" -G "${GENERATOR}"
  "-DCMAKE_CXX_COMPILER=${CXX}" "-DCMAKE_PREFIX_PATH=${prefix}" ${build_type_arg}
  "-DCMAKE_CXX_FLAGS=${flags}" "-DCMAKE_EXE_LINKER_FLAGS=${flags}")
run("build the outside project" "${CMAKE_COMMAND}" --build "${tmp}/build")
check_outside("find_package" "${tmp}/build/outside") # found through the build's RUNPATH

find_program(PKG_CONFIG pkg-config)
if(NOT PKG_CONFIG)
  fail("pkg-config is not installed")
endif()
run("pkg-config --cflags --libs msgpass" "${CMAKE_COMMAND}" -E env "PKG_CONFIG_PATH=${pc_dir}"
  "${PKG_CONFIG}" --cflags --libs msgpass)
separate_arguments(pc_flags UNIX_COMMAND "${run_output}")
separate_arguments(extra_flags UNIX_COMMAND "${flags}")
run("compile with pkg-config flags" "${CXX}" ${extra_flags} "${OUTSIDE}/main.cpp" -o "${tmp}/outside-pc" ${pc_flags})
check_outside("pkg-config" "${tmp}/outside-pc" "${CMAKE_COMMAND}" -E env "LD_LIBRARY_PATH=${libdir}")

# msgpass's MPI: the C ping-pong of tests/mpi built by the installed msgpass-mpicc, by
# cc with pkg-config msgpass-mpi's flags alone and by CMake with msgpass::mpi, runs with
# the installed msgpass-run -n 2.
if(APPS)
  run("msgpass-mpicc" "${prefix}/bin/msgpass-mpicc" ${extra_flags} "${TREE_SOURCE}/tests/mpi/pingpong.c"
    -o "${tmp}/mpi-pingpong")
  run("pkg-config --cflags --libs msgpass-mpi" "${CMAKE_COMMAND}" -E env "PKG_CONFIG_PATH=${pc_dir}"
    "${PKG_CONFIG}" --cflags --libs msgpass-mpi)
  separate_arguments(mpi_pc_flags UNIX_COMMAND "${run_output}")
  if(mpi_pc_flags MATCHES "std=c\\+\\+")
    fail("pkg-config msgpass-mpi gives C++ flags to C: ${run_output}")
  endif()
  run("cc with pkg-config msgpass-mpi" cc ${extra_flags} "${TREE_SOURCE}/tests/mpi/pingpong.c"
    -o "${tmp}/mpi-pingpong-pc" ${mpi_pc_flags})
  run("configure the outside MPI project" "${CMAKE_COMMAND}" -S "${OUTSIDE}-mpi" -B "${tmp}/build-mpi"
    -G "${GENERATOR}" "-DCMAKE_CXX_COMPILER=${CXX}" "-DCMAKE_PREFIX_PATH=${prefix}" ${build_type_arg}
    "-DPINGPONG=${TREE_SOURCE}/tests/mpi/pingpong.c" "-DCMAKE_C_FLAGS=${flags}" "-DCMAKE_EXE_LINKER_FLAGS=${flags}")
  run("build the outside MPI project" "${CMAKE_COMMAND}" --build "${tmp}/build-mpi")
  file(COPY_FILE "${tmp}/build-mpi/mpi-pingpong-cmake" "${tmp}/mpi-pingpong-cmake")
  # The wrapper's and CMake's programs find shared libraries through their RUNPATH;
  # pkg-config's through LD_LIBRARY_PATH, as with the outside project.
  foreach(program mpi-pingpong mpi-pingpong-pc mpi-pingpong-cmake)
    set(library_path "")
    if(program STREQUAL "mpi-pingpong-pc")
      set(library_path "LD_LIBRARY_PATH=${libdir}")
    endif()
    execute_process(COMMAND env -i "PATH=${prefix}/bin:/usr/bin:/bin" ${library_path}
        "${prefix}/bin/msgpass-run" -n 2 -- "${tmp}/${program}"
      WORKING_DIRECTORY "${tmp}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    if(NOT rc EQUAL 0 OR NOT out STREQUAL "[rank-0] pingpong: 2 ranks ok\n")
      fail("${program} through the installed msgpass-run -n 2 failed (${rc}):\n${out}\n${err}")
    endif()
  endforeach()
endif()

# The DAQ example from the installed tree alone.
if(APPS)
  set(examples "${prefix}/share/msgpass/examples/daq")
  execute_process(COMMAND env -i "PATH=${prefix}/bin:/usr/bin:/bin" "${RUN_EXAMPLE}" "${prefix}/bin/msgpass-run"
      "${examples}" "${DAQ_EXPECTED}" -- "${prefix}/bin/msgpass-daq" --events 2000 --timeout 20
    WORKING_DIRECTORY "${tmp}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    fail("the installed DAQ example failed (${rc}):\n${out}\n${err}")
  endif()
endif()

file(REMOVE_RECURSE "${tmp}")
message(STATUS "${KIND} package: libraries, programs, man pages, find_package and pkg-config builds, MPI "
               "programs from msgpass-mpicc, pkg-config msgpass-mpi and msgpass::mpi, and the DAQ example work")
