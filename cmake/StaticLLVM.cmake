# Debian's LLVM/MLIR 22 exports targets that link the shared libLLVM ("LLVM" in their interface)
# and, through LLVMSupport, the shared libz, libzstd and libz3. attnc must run on machines
# without LLVM (the GPU machine), so every "LLVM" item becomes the static component archives
# attnc needs, and LLVMSupport links zlib and zstd statically and drops z3 (only LLVM's SMT
# solver uses it, and nothing in attnc does).
set(LLVM_LINK_LLVM_DYLIB OFF)
set(MLIR_LINK_MLIR_DYLIB OFF)

llvm_map_components_to_libnames(ATTNC_LLVM_STATIC_LIBS
  Support Demangle TargetParser BinaryFormat Remarks BitstreamReader)

find_library(ATTNC_ZLIB_STATIC NAMES libz.a REQUIRED)
find_library(ATTNC_ZSTD_STATIC NAMES libzstd.a REQUIRED)
set_target_properties(LLVMSupport PROPERTIES
  INTERFACE_LINK_LIBRARIES "rt;dl;m;${ATTNC_ZSTD_STATIC};${ATTNC_ZLIB_STATIC};LLVMDemangle")

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
