# The installed package works for a user outside the tree (cmake -P script, run by
# ctest): installs the current build into a fresh prefix, builds tests/install/outside
# against it with find_package(msgpass CONFIG) and again with pkg-config, and runs
# both programs. Sanitizer flags of the build are passed on, since the installed
# static libraries carry sanitizer references. The temporary directory is removed
# whatever the outcome.
#
# Inputs (-D): BUILD_DIR, SOURCE_DIR (the outside project), GENERATOR, CXX,
# BUILD_TYPE, SANITIZE (as MSGPASS_SANITIZE, may be empty).
cmake_minimum_required(VERSION 3.25)

foreach(var BUILD_DIR SOURCE_DIR GENERATOR CXX)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "install_test.cmake: -D${var}= is required")
  endif()
endforeach()

string(RANDOM LENGTH 12 suffix)
set(tmp "${BUILD_DIR}/install-test-${suffix}")
file(REMOVE_RECURSE "${tmp}")
file(MAKE_DIRECTORY "${tmp}")
set(prefix "${tmp}/prefix")

function(fail what)
  file(REMOVE_RECURSE "${tmp}")
  message(FATAL_ERROR "${what}")
endfunction()

# Runs a command; on failure removes the temporary directory and stops with its output.
function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    fail("${what} failed (${rc}):\n${out}\n${err}")
  endif()
  set(run_output "${out}" PARENT_SCOPE)
endfunction()

set(expected "^msgpass outside: fragments=2 size=32 nodes=2 technology=sci\n$")
set(sanitize_flags "")
if(SANITIZE)
  set(sanitize_flags "-fsanitize=${SANITIZE} -fno-omit-frame-pointer")
endif()

run("cmake --install" "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${prefix}")

# find_package(msgpass CONFIG REQUIRED), as documented in README.md.
set(build_type_arg "")
if(BUILD_TYPE)
  set(build_type_arg "-DCMAKE_BUILD_TYPE=${BUILD_TYPE}")
endif()
run("configure the outside project" "${CMAKE_COMMAND}" -S "${SOURCE_DIR}" -B "${tmp}/build" -G "${GENERATOR}"
  "-DCMAKE_CXX_COMPILER=${CXX}" "-DCMAKE_PREFIX_PATH=${prefix}" ${build_type_arg}
  "-DCMAKE_CXX_FLAGS=${sanitize_flags}" "-DCMAKE_EXE_LINKER_FLAGS=${sanitize_flags}")
run("build the outside project" "${CMAKE_COMMAND}" --build "${tmp}/build")
run("run the outside project" "${tmp}/build/outside")
if(NOT run_output MATCHES "${expected}")
  fail("the outside project printed:\n${run_output}\nexpected a line matching ${expected}")
endif()

# The same program from pkg-config's flags alone.
find_program(PKG_CONFIG pkg-config)
if(NOT PKG_CONFIG)
  fail("pkg-config is not installed")
endif()
file(GLOB pc_file "${prefix}/*/pkgconfig/msgpass.pc" "${prefix}/*/*/pkgconfig/msgpass.pc")
if(NOT pc_file)
  fail("no msgpass.pc under ${prefix}")
endif()
list(GET pc_file 0 pc_file)
get_filename_component(pc_dir "${pc_file}" DIRECTORY)
run("pkg-config --cflags --libs msgpass" "${CMAKE_COMMAND}" -E env "PKG_CONFIG_PATH=${pc_dir}"
  "${PKG_CONFIG}" --cflags --libs msgpass)
separate_arguments(pc_flags UNIX_COMMAND "${run_output}")
separate_arguments(extra_flags UNIX_COMMAND "${sanitize_flags}")
run("compile with pkg-config flags" "${CXX}" ${extra_flags} "${SOURCE_DIR}/main.cpp" -o "${tmp}/outside-pc"
  ${pc_flags})
run("run the pkg-config build" "${tmp}/outside-pc")
if(NOT run_output MATCHES "${expected}")
  fail("the pkg-config build printed:\n${run_output}\nexpected a line matching ${expected}")
endif()

file(REMOVE_RECURSE "${tmp}")
message(STATUS "installed package: find_package and pkg-config builds both work")
