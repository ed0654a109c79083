# Read by llama.cpp's CMakeLists right after its project() call when llama-cpp-python is built
# with -DCMAKE_PROJECT_llama.cpp_INCLUDE=<this file>, as README's main-job command, .ci/run and
# the embedded observer's install hint build it.
#
# llama-cpp-python turns on llama.cpp's `common` utilities (argument parsing, chat templates,
# downloads with their HTTP client) and forces that into the cache before llama.cpp reads it,
# so -DLLAMA_BUILD_COMMON=OFF alone cannot turn them off. The binding never loads them, and
# once the multimodal library is off they are 53 of the 127 files compiled, 228 of 485
# CPU-seconds (measured on two cores) and the build's peak of memory. Set here, after
# the binding's choice and before llama.cpp's, the option holds: they are neither compiled
# nor installed.
set(LLAMA_BUILD_COMMON OFF CACHE BOOL "llama: build common utils library" FORCE)
