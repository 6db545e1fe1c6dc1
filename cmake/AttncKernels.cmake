# attnc_add_kernels(TARGET app SPECS a.yaml b.yaml [ARCHS sm_80 sm_90a] [OUTPUT_DIR dir])
#
# Compiles each spec at build time with `attnc compile --emit header` for every arch at once and
# adds the generated <name>.h (the spec's `name:`) to TARGET's include path. One header per spec
# embeds a cubin + PTX for each arch; its <name>_forward() loads, per CUDA context, the form that
# fits the device (an exact arch, else a cubin of the same major, else PTX). TARGET links
# attnc::runtime only: no LLVM, no NVRTC at run time. Default ARCHS: sm_80 sm_90a.

function(attnc_add_kernels)
  cmake_parse_arguments(ARG "" "TARGET;OUTPUT_DIR" "SPECS;ARCHS" ${ARGN})
  if(NOT ARG_TARGET OR NOT ARG_SPECS)
    message(FATAL_ERROR "attnc_add_kernels: TARGET and SPECS are required")
  endif()
  if(NOT ARG_ARCHS)
    set(ARG_ARCHS sm_80 sm_90a)
  endif()
  if(NOT ARG_OUTPUT_DIR)
    set(ARG_OUTPUT_DIR "${CMAKE_CURRENT_BINARY_DIR}/attnc_kernels/${ARG_TARGET}")
  endif()
  list(JOIN ARG_ARCHS "," _archs)
  list(LENGTH ARG_ARCHS _arch_count)

  set(_headers "")
  foreach(_spec IN LISTS ARG_SPECS)
    get_filename_component(_spec "${_spec}" ABSOLUTE)
    # The header is named after the spec's `name:` (what the launcher is called).
    file(STRINGS "${_spec}" _name_line REGEX "^name:[ \t]*[A-Za-z_][A-Za-z0-9_]*")
    if(NOT _name_line)
      message(FATAL_ERROR "attnc_add_kernels: ${_spec} has no 'name:' line")
    endif()
    string(REGEX REPLACE "^name:[ \t]*([A-Za-z_][A-Za-z0-9_]*).*" "\\1" _name "${_name_line}")
    set(_byproducts "")
    foreach(_arch IN LISTS ARG_ARCHS)
      if(_arch_count GREATER 1)
        list(APPEND _byproducts "${ARG_OUTPUT_DIR}/${_name}.${_arch}.cubin" "${ARG_OUTPUT_DIR}/${_name}.${_arch}.ptx")
      else()
        list(APPEND _byproducts "${ARG_OUTPUT_DIR}/${_name}.cubin" "${ARG_OUTPUT_DIR}/${_name}.ptx")
      endif()
    endforeach()
    add_custom_command(
      OUTPUT "${ARG_OUTPUT_DIR}/${_name}.h"
      BYPRODUCTS ${_byproducts}
      COMMAND attnc::attnc compile "${_spec}" --target ${_archs} --emit header -o "${ARG_OUTPUT_DIR}"
      DEPENDS "${_spec}" attnc::attnc
      COMMENT "attnc: compiling ${_name} for ${_archs}"
      VERBATIM)
    list(APPEND _headers "${ARG_OUTPUT_DIR}/${_name}.h")
  endforeach()
  target_sources(${ARG_TARGET} PRIVATE ${_headers})
  target_include_directories(${ARG_TARGET} PRIVATE "${ARG_OUTPUT_DIR}")
  target_link_libraries(${ARG_TARGET} PRIVATE attnc::runtime)
endfunction()
