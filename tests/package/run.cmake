# ctest driver: install ember from BUILD_DIR into a scratch prefix, then
# configure, build and run the outside project against it, and run its
# worker as a 2-process job under the installed `ember` command, which must
# find the installed libember through its RUNPATH (no LD_LIBRARY_PATH), and
# run the installed `ember env`, which in a CUDA build loads the installed
# CUDA plugin from beside libember (Note [CUDA backend plugin] in core/README.md).
# EXTRA_FLAGS carries the sanitizer flags of a sanitizer build, whose library
# needs their runtime.
set(prefix ${WORK_DIR}/prefix)
file(REMOVE_RECURSE ${WORK_DIR})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix} COMMAND_ERROR_IS_FATAL ANY
                OUTPUT_QUIET)
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/build -G Ninja
                        -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
                        -DCMAKE_BUILD_TYPE=Release
                        "-DCMAKE_CXX_FLAGS=${EXTRA_FLAGS}" "-DCMAKE_EXE_LINKER_FLAGS=${EXTRA_FLAGS}"
                COMMAND_ERROR_IS_FATAL ANY)
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/build COMMAND_ERROR_IS_FATAL ANY)
execute_process(COMMAND ${WORK_DIR}/build/consumer COMMAND_ERROR_IS_FATAL ANY)
execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH OMP_WAIT_POLICY=passive
                        ${prefix}/bin/ember launch --nproc-per-node 2 -- ${WORK_DIR}/build/launch_worker
                RESULT_VARIABLE launch_result OUTPUT_VARIABLE launch_output ERROR_VARIABLE launch_output
                TIMEOUT 120)
string(REGEX MATCHALL "launch ok" oks "${launch_output}")
list(LENGTH oks num_oks)
if(NOT launch_result EQUAL 0 OR NOT num_oks EQUAL 2)
  message(FATAL_ERROR "the installed `ember launch --nproc-per-node 2` failed (exit ${launch_result}):\n${launch_output}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH ${prefix}/bin/ember env
                RESULT_VARIABLE env_result OUTPUT_VARIABLE env_output ERROR_VARIABLE env_output TIMEOUT 60)
if(NOT env_result EQUAL 0 OR (env_output MATCHES "CUDA backend: built" AND NOT env_output MATCHES "\n  - CUDA runtime [0-9]"))
  message(FATAL_ERROR "the installed `ember env` failed to load or describe the CUDA backend (exit ${env_result}):\n${env_output}")
endif()
file(REMOVE_RECURSE ${WORK_DIR})
