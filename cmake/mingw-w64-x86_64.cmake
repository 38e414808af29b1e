# Cross-compiles the engine for 64-bit Windows with Debian's MinGW-w64 (package g++-mingw-w64-x86-64-posix):
#   cmake -S . -B build-mingw -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/mingw-w64-x86_64.cmake
# The -posix variant is required: it provides std::thread and std::mutex (the -win32 variant does not in GCC 12).
set(CMAKE_SYSTEM_NAME Windows)
set(CMAKE_SYSTEM_PROCESSOR x86_64)
set(STRATA_MINGW_PREFIX x86_64-w64-mingw32)
set(CMAKE_C_COMPILER ${STRATA_MINGW_PREFIX}-gcc-posix)
set(CMAKE_CXX_COMPILER ${STRATA_MINGW_PREFIX}-g++-posix)
set(CMAKE_RC_COMPILER ${STRATA_MINGW_PREFIX}-windres)
set(CMAKE_FIND_ROOT_PATH /usr/${STRATA_MINGW_PREFIX})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
