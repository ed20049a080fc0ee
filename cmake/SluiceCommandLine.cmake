# sluice_command_line_glue(<target> <file>... [PCH <header>...] [PCH_FROM <target2>]):
# the files of <target> that include CLI11 (a command's option parsing and
# reports; on no data path) compile at -Og, and where there are several, with
# <CLI/CLI.hpp> (and the PCH headers) precompiled once for the target, or
# with <target2>'s (PCH_FROM: a target whose glue precompiled the same
# headers; each of those took about 12 s to build); its other files skip the
# precompiled header. CLI11 2.1 is
# header-only and compiles its validators into every file that includes it:
# 12-16 s a file at -O3 here (6 tool files: 81 -> 50 s of compiling at -O1, the
# headers' builds included; -Og takes another fifth off: apps/kv/options.cc
# 6.4 -> 5.2 s).
function(sluice_command_line_glue target)
  cmake_parse_arguments(PARSE_ARGV 1 G "" "PCH_FROM" "PCH")
  set(files ${G_UNPARSED_ARGUMENTS})
  # (GCC only: clang refuses a precompiled header built at another -O level.)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    set_source_files_properties(${files} TARGET_DIRECTORY ${target} PROPERTIES COMPILE_OPTIONS -Og)
  endif()
  # A precompiled header pays only where several files share it: for one
  # file it saves about 0.5 s of its compile and costs about 5 s to build
  # (measured on apps/query/options.cc, idle).
  list(LENGTH files nfiles)
  if(nfiles LESS 2)
    return()
  endif()
  if(G_PCH_FROM)
    target_precompile_headers(${target} REUSE_FROM ${G_PCH_FROM})
    # (A library's precompiled header is built with -fPIC, and GCC refuses
    # it in a file built with a program's -fPIE: the glue files are -fPIC.)
    set_property(SOURCE ${files} TARGET_DIRECTORY ${target} APPEND PROPERTY COMPILE_OPTIONS -fPIC)
  else()
    target_precompile_headers(${target} PRIVATE <CLI/CLI.hpp> ${G_PCH})
  endif()
  get_target_property(all ${target} SOURCES)
  foreach(f IN LISTS all)
    if(NOT f IN_LIST files)
      set_source_files_properties(${f} TARGET_DIRECTORY ${target} PROPERTIES SKIP_PRECOMPILE_HEADERS ON)
    endif()
  endforeach()
endfunction()
