# sluice_gtest: registers a gtest executable with CTest, one test per case.
#
#   sluice_gtest(<target> NAME <prefix> LABELS <tier> <component>...
#                [ENV VAR=value...] [FILTER <gtest filter>] [SLOW <gtest filter>]
#                [TIMEOUT <seconds>] [PER_SUITE] [ARGS <arg>...] [PROPERTIES <name> <value>...])
#
# Each case becomes the CTest test <prefix>.<Suite>.<Case>, so that a failure
# names its case and `ctest -j` balances cases rather than whole binaries.
# The cases are listed (<exe> --gtest_list_tests) when ctest reads the tests,
# and again only after the executable changes; the list is cached beside the
# build files. CMake's gtest_discover_tests does the same but cannot carry a
# list-valued property (two labels, two environment variables).
#
#   LABELS      the tier (unit, system or app) and the component; every case
#               gets them all.
#   ENV         environment variables of every case (a variant's transport).
#   FILTER      only the cases this gtest filter selects (default: all).
#   SLOW        the cases this filter selects also get the label `slow`, which
#               `make test` leaves out and `make test-slow` runs.
#   PER_SUITE   one test per suite (<prefix>.<Suite>) instead of per case: for
#               suites that start one job in SetUpTestSuite and share it.
#   ARGS        extra arguments after --gtest_filter.
#   PROPERTIES  further CTest properties of every case (RESOURCE_LOCK ...).
#
# A case that is DISABLED_ is not registered. An executable that cannot list
# its cases registers one failing test <prefix>.list_failed that says why.
set(SLUICE_GTEST_DISCOVER_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/SluiceTestDiscover.cmake)

function(sluice_gtest target)
  cmake_parse_arguments(PARSE_ARGV 1 G "PER_SUITE" "NAME;FILTER;SLOW;TIMEOUT"
                        "LABELS;ENV;ARGS;PROPERTIES")
  if(NOT G_NAME OR NOT G_LABELS)
    message(FATAL_ERROR "sluice_gtest(${target}): NAME and LABELS are required")
  endif()
  if(NOT G_FILTER)
    set(G_FILTER "*")
  endif()
  if(NOT G_TIMEOUT)
    set(G_TIMEOUT 300)
  endif()
  set(dir ${CMAKE_CURRENT_BINARY_DIR}/gtest)
  set(include_file ${dir}/${G_NAME}.cmake)
  # The generated include file only sets the registration's variables (with
  # bracket arguments, so that lists and gtest filters pass untouched) and
  # includes the shared discovery script.
  set(content "")
  foreach(var NAME FILTER SLOW TIMEOUT PER_SUITE LABELS ENV ARGS PROPERTIES)
    string(APPEND content "set(G_${var} [==[${G_${var}}]==])\n")
  endforeach()
  string(APPEND content "set(G_EXE [==[$<TARGET_FILE:${target}>]==])\n")
  string(APPEND content "set(G_CACHE [==[${dir}/${G_NAME}.cases]==])\n")
  string(APPEND content "include([==[${SLUICE_GTEST_DISCOVER_SCRIPT}]==])\n")
  file(GENERATE OUTPUT ${include_file} CONTENT "${content}")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${include_file})
endfunction()

# sluice_slow_only(<target>...): programs only slow tests run (every case of
# theirs is labelled `slow`). `make test` does not build them (they are out
# of `all`); the target slow_tests does, and `make test-slow` builds it
# first. Until then their registrations are one <prefix>.NOT_BUILT test each,
# labelled slow too.
function(sluice_slow_only)
  if(NOT TARGET slow_tests)
    add_custom_target(slow_tests)
  endif()
  foreach(t IN LISTS ARGN)
    set_target_properties(${t} PROPERTIES EXCLUDE_FROM_ALL ON)
    add_dependencies(slow_tests ${t})
  endforeach()
endfunction()

# sluice_gtest_files(<target> PREFIX <prefix> FILES <stem>... LABELS ...
#                    [NAME <name>] [VARIANT <name>] [TIMEOUT <seconds>] [ENV ...] [PROPERTIES ...]
#                    [FILTER <gtest filter>] [SLOW <gtest filter>] [PER_SUITE]):
# registers a program built from several gtest files (a unity build compiles
# them together, sharing the headers' and templates' work) as if each file
# were its own program: the cases of <stem>.cc (a path from this directory,
# without .cc) are <prefix>.<its file name, or NAME>[.<variant>].<Suite>.<Case>.
# A file's suites are the first arguments of its TEST, TEST_F and TEST_P
# lines; a suite in two files is an error (name them apart), and so is
# TYPED_TEST (a TEST_P suite's cases are */Suite.*). FILTER narrows a
# file's cases: a positive pattern that names its suite (Suite.*) stands,
# one that starts with * is tried on each of the file's suites (*Killed*:
# Suite.*Killed*), and negative ones (after -) stand. SLOW and PER_SUITE
# are sluice_gtest's.
function(sluice_gtest_files target)
  cmake_parse_arguments(PARSE_ARGV 1 G "PER_SUITE" "PREFIX;NAME;VARIANT;TIMEOUT;FILTER;SLOW"
                        "FILES;LABELS;ENV;PROPERTIES")
  foreach(stem IN LISTS G_FILES)
    set(file ${CMAKE_CURRENT_SOURCE_DIR}/${stem}.cc)
    file(STRINGS ${file} lines REGEX "^(TEST|TEST_F|TEST_P|TYPED_TEST)\\(")
    set(suites "")
    set(patterns "")  # each suite's cases
    foreach(line IN LISTS lines)
      if(NOT line MATCHES "^TEST(_F|_P)?\\(([A-Za-z0-9_]+),")
        message(FATAL_ERROR "sluice_gtest_files(${target}): ${stem}.cc: '${line}': no TYPED_TEST")
      endif()
      if(NOT CMAKE_MATCH_2 IN_LIST suites)
        list(APPEND suites ${CMAKE_MATCH_2})
        if(CMAKE_MATCH_1 STREQUAL "_P")
          list(APPEND patterns "*/${CMAKE_MATCH_2}.*")  # Prefix/Suite.Case/N
        else()
          list(APPEND patterns "${CMAKE_MATCH_2}.*")
        endif()
      endif()
    endforeach()
    if(NOT suites)
      message(FATAL_ERROR "sluice_gtest_files(${target}): ${stem}.cc defines no TEST")
    endif()
    # (each suite's file, over every call for this target: a file may be
    # registered apart, and again for each variant)
    foreach(suite IN LISTS suites)
      get_property(owner TARGET ${target} PROPERTY SLUICE_GTEST_SUITE_${suite})
      if(owner AND NOT owner STREQUAL file)
        message(FATAL_ERROR "sluice_gtest_files(${target}): suite ${suite} is in ${stem}.cc and ${owner}")
      endif()
      set_property(TARGET ${target} PROPERTY SLUICE_GTEST_SUITE_${suite} ${file})
    endforeach()
    # FILTER's positive patterns narrowed to the file's suites (or the
    # file's suites, if it has none), then its negative ones.
    set(positive ${patterns})
    set(negative "")
    if(G_FILTER)
      string(FIND "${G_FILTER}" "-" dash)
      if(dash EQUAL -1)
        set(given "${G_FILTER}")
      else()
        string(SUBSTRING "${G_FILTER}" 0 ${dash} given)
        math(EXPR after "${dash} + 1")
        string(SUBSTRING "${G_FILTER}" ${after} -1 negative)
      endif()
      if(given)
        set(positive "")
        string(REPLACE ":" ";" given "${given}")
        foreach(p IN LISTS given)
          if(p MATCHES "^\\*")
            foreach(suite IN LISTS patterns)
              string(REGEX REPLACE "\\*$" "" suite "${suite}")
              list(APPEND positive "${suite}${p}")
            endforeach()
          else()
            list(APPEND positive "${p}")
          endif()
        endforeach()
      endif()
    endif()
    string(JOIN ":" filter ${positive})
    if(negative)
      string(APPEND filter "-${negative}")
    endif()
    get_filename_component(name ${stem} NAME)
    if(G_NAME)
      set(name ${G_NAME})
    endif()
    if(G_VARIANT)
      string(APPEND name .${G_VARIANT})
    endif()
    set(per_suite "")
    if(G_PER_SUITE)
      set(per_suite PER_SUITE)
    endif()
    sluice_gtest(${target} NAME ${G_PREFIX}.${name} LABELS ${G_LABELS} FILTER ${filter}
                 SLOW ${G_SLOW} TIMEOUT ${G_TIMEOUT} ENV ${G_ENV} PROPERTIES ${G_PROPERTIES}
                 ${per_suite})
  endforeach()
endfunction()
