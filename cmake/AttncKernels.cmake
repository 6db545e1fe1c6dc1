# attnc_add_kernels(TARGET app SPECS a.yaml b.yaml [TARGETS sm_80 sm_90a] [BACKWARD]
#                   [OUTPUT_DIR dir])
#
# Compiles each spec at build time with `attnc compile --emit header` for every target at once
# and adds the generated <name>.h (the spec's `name:`, which `attnc compile --print-name` reads
# at configure time) to TARGET's include path. One header per spec embeds a cubin + PTX for each
# target; its <name>_forward() loads, per CUDA context, the form that fits the device (an exact
# arch, else a cubin of the same major, else PTX). BACKWARD compiles the backward kernels too and
# adds <name>_backward(). TARGET links attnc::runtime only: no LLVM, no NVRTC at run time.
# Default TARGETS: sm_80 sm_90a. ARCHS is another name for TARGETS.

function(attnc_add_kernels)
  cmake_parse_arguments(ARG "BACKWARD" "TARGET;OUTPUT_DIR" "SPECS;TARGETS;ARCHS" ${ARGN})
  if(NOT ARG_TARGET OR NOT ARG_SPECS)
    message(FATAL_ERROR "attnc_add_kernels: TARGET and SPECS are required")
  endif()
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "attnc_add_kernels: unknown arguments: ${ARG_UNPARSED_ARGUMENTS}")
  endif()
  list(APPEND ARG_TARGETS ${ARG_ARCHS})
  if(NOT ARG_TARGETS)
    set(ARG_TARGETS sm_80 sm_90a)
  endif()
  list(REMOVE_DUPLICATES ARG_TARGETS)
  if(NOT ARG_OUTPUT_DIR)
    set(ARG_OUTPUT_DIR "${CMAKE_CURRENT_BINARY_DIR}/attnc_kernels/${ARG_TARGET}")
  endif()
  list(JOIN ARG_TARGETS "," _targets)
  list(LENGTH ARG_TARGETS _target_count)
  set(_backward "")
  if(ARG_BACKWARD)
    set(_backward --backward)
  endif()
  # The installed (or build tree's) attnc, run at configure time for the spec's name.
  get_target_property(_attnc attnc::attnc LOCATION)

  set(_headers "")
  foreach(_spec IN LISTS ARG_SPECS)
    get_filename_component(_spec "${_spec}" ABSOLUTE)
    # The header is named after the spec's `name:` (what the launcher is called), as attnc reads
    # it: quoted, flow-style or commented YAML alike. A renamed spec configures again.
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${_spec}")
    execute_process(COMMAND "${_attnc}" compile "${_spec}" --print-name
                    OUTPUT_VARIABLE _name ERROR_VARIABLE _why RESULT_VARIABLE _status
                    OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(NOT _status EQUAL 0)
      message(FATAL_ERROR "attnc_add_kernels: ${_spec} is not a spec attnc reads:\n${_why}")
    endif()
    set(_byproducts "")
    foreach(_target IN LISTS ARG_TARGETS)
      if(_target_count GREATER 1)
        list(APPEND _byproducts "${ARG_OUTPUT_DIR}/${_name}.${_target}.cubin"
                                "${ARG_OUTPUT_DIR}/${_name}.${_target}.ptx")
      else()
        list(APPEND _byproducts "${ARG_OUTPUT_DIR}/${_name}.cubin" "${ARG_OUTPUT_DIR}/${_name}.ptx")
      endif()
    endforeach()
    add_custom_command(
      OUTPUT "${ARG_OUTPUT_DIR}/${_name}.h"
      BYPRODUCTS ${_byproducts}
      COMMAND attnc::attnc compile "${_spec}" --target ${_targets} ${_backward} --emit header
              -o "${ARG_OUTPUT_DIR}" --quiet
      DEPENDS "${_spec}" attnc::attnc
      COMMENT "attnc: compiling ${_name} for ${_targets}"
      VERBATIM)
    list(APPEND _headers "${ARG_OUTPUT_DIR}/${_name}.h")
  endforeach()
  target_sources(${ARG_TARGET} PRIVATE ${_headers})
  target_include_directories(${ARG_TARGET} PRIVATE "${ARG_OUTPUT_DIR}")
  target_link_libraries(${ARG_TARGET} PRIVATE attnc::runtime)
endfunction()
