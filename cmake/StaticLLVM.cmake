# Debian's LLVM/MLIR 22 exports targets that link the shared libLLVM ("LLVM" in their interface).
# attnc must run on machines without LLVM, so every imported target's "LLVM" item is replaced by
# the static component archives it actually needs.
set(LLVM_LINK_LLVM_DYLIB OFF)
set(MLIR_LINK_MLIR_DYLIB OFF)

llvm_map_components_to_libnames(ATTNC_LLVM_STATIC_LIBS Support Demangle TargetParser BinaryFormat)

get_property(_attnc_imported DIRECTORY PROPERTY IMPORTED_TARGETS)
foreach(_target IN LISTS _attnc_imported)
  get_target_property(_type ${_target} TYPE)
  if(_type STREQUAL "INTERFACE_LIBRARY" OR _type STREQUAL "STATIC_LIBRARY")
    get_target_property(_links ${_target} INTERFACE_LINK_LIBRARIES)
    if(_links AND "LLVM" IN_LIST _links)
      list(TRANSFORM _links REPLACE "^LLVM$" "${ATTNC_LLVM_STATIC_LIBS}")
      set_target_properties(${_target} PROPERTIES INTERFACE_LINK_LIBRARIES "${_links}")
    endif()
  endif()
endforeach()
