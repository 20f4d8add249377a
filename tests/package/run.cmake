# ctest driver: install ember from BUILD_DIR into a scratch prefix, then
# configure, build and run the outside project against it, and run its
# worker as a 2-process job under the installed `ember` command, which must
# find the installed libember through its RUNPATH (no LD_LIBRARY_PATH).
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
file(REMOVE_RECURSE ${WORK_DIR})
