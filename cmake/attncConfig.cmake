# find_package(attnc): imported targets attnc::runtime (libattncRuntime.a: launch, validation,
# driver/NVRTC via dlopen; no LLVM), attnc::attnc_c (libattnc.so: the C API of attnc_c.h with the
# JIT inside) and attnc::attnc (the compiler executable), plus attnc_add_kernels() from
# AttncKernels.cmake. Works from an install prefix and from a build tree
# (the build tree writes attncBuildTree.cmake next to this file).
include(CMakeFindDependencyMacro)
find_dependency(Threads)

if(EXISTS "${CMAKE_CURRENT_LIST_DIR}/attncBuildTree.cmake")
  include("${CMAKE_CURRENT_LIST_DIR}/attncBuildTree.cmake")
else()
  include("${CMAKE_CURRENT_LIST_DIR}/attncTargets.cmake")
endif()

include("${CMAKE_CURRENT_LIST_DIR}/AttncKernels.cmake")
set(attnc_FOUND TRUE)
