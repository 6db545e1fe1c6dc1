# Installs the build tree into PREFIX (cmake --install) and compiles SOURCE against PREFIX/include
# alone: the headers `make install` ships are enough to build a spec and call the JIT.
#   cmake -DBUILD_DIR=... -DPREFIX=... -DCXX=... -DSOURCE=... -P installed_headers.cmake
file(REMOVE_RECURSE ${PREFIX})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${PREFIX}
                RESULT_VARIABLE installed OUTPUT_QUIET)
if(NOT installed EQUAL 0)
  message(FATAL_ERROR "cmake --install ${BUILD_DIR} --prefix ${PREFIX} failed: ${installed}")
endif()
execute_process(COMMAND ${CXX} -std=c++17 -fsyntax-only -I${PREFIX}/include ${SOURCE}
                RESULT_VARIABLE compiled)
if(NOT compiled EQUAL 0)
  message(FATAL_ERROR "${SOURCE} does not compile against the installed headers alone")
endif()
