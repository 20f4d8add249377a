# Compiler flags for ember's own code. Warnings are errors here, never for
# third-party headers (those come in as SYSTEM include directories).
add_library(ember_warnings INTERFACE)
target_compile_options(ember_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Werror -Wno-error=deprecated-declarations>)

if(EMBER_SANITIZE)
  add_compile_options(-fsanitize=${EMBER_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${EMBER_SANITIZE})
endif()
