# Sanitizer and fuzzing builds (issue 24). Both are CPU-only and meant for a second build folder:
#   CC=clang CXX=clang++ cmake -S . -B build-asan -G Ninja -DNVLLM_CUDA=OFF -DNVLLM_SANITIZE=ON -DNVLLM_FUZZ=ON
# NVLLM_SANITIZE compiles and links everything with ASan + UBSan (any UB report fails the test);
# NVLLM_FUZZ (clang only) adds libFuzzer's coverage hooks to the library and builds one fuzz
# target per fuzz/*_fuzz.cpp. The two share one build so that CI compiles the library once.
option(NVLLM_SANITIZE "Build with AddressSanitizer and UndefinedBehaviorSanitizer" OFF)
option(NVLLM_FUZZ "Build the libFuzzer targets in fuzz/ (clang)" OFF)

if(NVLLM_SANITIZE)
  if(NVLLM_CUDA)
    message(FATAL_ERROR "NVLLM_SANITIZE is for the CPU-only build: add -DNVLLM_CUDA=OFF")
  endif()
  set(_nvllm_san -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
  add_compile_options(${_nvllm_san})
  add_link_options(${_nvllm_san})
endif()

if(NVLLM_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "NVLLM_FUZZ needs clang (libFuzzer): CXX=clang++")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()

# Called after nvllm_lib exists.
function(nvllm_add_fuzz_targets)
  if(NOT NVLLM_FUZZ)
    return()
  endif()
  file(GLOB targets CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/fuzz/*_fuzz.cpp)
  # The chat template engine (lib/chat) is built on its own branch; its target waits for it.
  if(NOT EXISTS ${CMAKE_SOURCE_DIR}/lib/chat/chat_template.cpp)
    list(FILTER targets EXCLUDE REGEX "chat_template_fuzz\\.cpp$")
  endif()
  foreach(src ${targets})
    get_filename_component(name ${src} NAME_WE)
    add_executable(${name} ${src})
    target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/lib ${CMAKE_SOURCE_DIR})
    target_link_libraries(${name} PRIVATE nvllm_lib)
    target_link_options(${name} PRIVATE -fsanitize=fuzzer)
    target_compile_definitions(${name} PRIVATE NVLLM_TESTDATA="${CMAKE_SOURCE_DIR}/testdata")
    add_dependencies(nvllm_fuzz ${name})
  endforeach()
endfunction()
