# Runs one compile-fail test; invoked as `cmake -P kvbm_compile_fail.cmake <params>`.
#
# <params> is a file written by kvbm_add_compile_fail_test() (tests/CMakeLists.txt) that sets
#   KVBM_CF_NAME      test name
#   KVBM_CF_CXX       the C++ compiler
#   KVBM_CF_SOURCE    the source that must NOT compile
#   KVBM_CF_REGEX     a regex the compiler diagnostics must match
#   KVBM_CF_INCLUDES  include directories
#   KVBM_CF_DEFINES   compile definitions
#
# The test passes only if compiling SOURCE fails AND the diagnostics match REGEX, so a
# source that fails for an unrelated reason (a typo, a missing header) is not a pass.
# If the source mentions KVBM_COMPILE_FAIL_CONTROL, it is first compiled with that macro
# defined and must then compile cleanly: wrap the offending line in
# `#ifndef KVBM_COMPILE_FAIL_CONTROL` to prove that it alone is what fails.

cmake_minimum_required(VERSION 3.25)

if(NOT CMAKE_ARGV3 OR NOT EXISTS "${CMAKE_ARGV3}")
  message(FATAL_ERROR "usage: cmake -P kvbm_compile_fail.cmake <params.cmake>")
endif()
include("${CMAKE_ARGV3}")

set(flags -std=c++20 -fsyntax-only)
foreach(dir IN LISTS KVBM_CF_INCLUDES)
  if(dir)
    list(APPEND flags "-I${dir}")
  endif()
endforeach()
foreach(def IN LISTS KVBM_CF_DEFINES)
  if(def)
    list(APPEND flags "-D${def}")
  endif()
endforeach()

# LC_ALL=C: plain ASCII quotes in diagnostics, so regexes need not match typographic ones.
file(READ "${KVBM_CF_SOURCE}" source_text)
string(FIND "${source_text}" "KVBM_COMPILE_FAIL_CONTROL" has_control)
if(NOT has_control EQUAL -1)
  execute_process(
    COMMAND ${CMAKE_COMMAND} -E env LC_ALL=C "${KVBM_CF_CXX}" ${flags} -DKVBM_COMPILE_FAIL_CONTROL
            "${KVBM_CF_SOURCE}"
    RESULT_VARIABLE control_result
    OUTPUT_VARIABLE control_output
    ERROR_VARIABLE control_output)
  if(NOT control_result EQUAL 0)
    message(FATAL_ERROR
      "${KVBM_CF_NAME}: the control build (-DKVBM_COMPILE_FAIL_CONTROL) of ${KVBM_CF_SOURCE} "
      "must compile but failed, so the test would pass for the wrong reason:\n${control_output}")
  endif()
  message(STATUS "${KVBM_CF_NAME}: control build compiles")
endif()

execute_process(
  COMMAND ${CMAKE_COMMAND} -E env LC_ALL=C "${KVBM_CF_CXX}" ${flags} "${KVBM_CF_SOURCE}"
  RESULT_VARIABLE result
  OUTPUT_VARIABLE output
  ERROR_VARIABLE output)

if(result EQUAL 0)
  message(FATAL_ERROR
    "${KVBM_CF_NAME}: ${KVBM_CF_SOURCE} compiled, but it must be rejected "
    "with a diagnostic matching: ${KVBM_CF_REGEX}")
endif()
if(NOT output MATCHES "${KVBM_CF_REGEX}")
  message(FATAL_ERROR
    "${KVBM_CF_NAME}: ${KVBM_CF_SOURCE} failed to compile as expected, but no diagnostic "
    "matches '${KVBM_CF_REGEX}'. Compiler output:\n${output}")
endif()
message(STATUS "${KVBM_CF_NAME}: rejected as expected (diagnostic matches '${KVBM_CF_REGEX}')")
