# Was racecheck's report on step 25's first release the kernel's hazard or the tool's?
# (docs/25_hopper_backward.md, "What racecheck reports"). Included by tests/CMakeLists.txt.
#
#   racecheck_ring            the minimal ring (gpu/racecheck_ring.cu), sm_90a; its correct
#                             variants must read every value right, and the broken one must be
#                             caught reading its stage after the producer refilled it
# tests/gpu/racecheck_ring.sh runs the variants under compute-sanitizer (not a ctest entry: a
# sanitizer run is slow and its outcome is the measurement, read as the chapter says).
add_executable(racecheck_ring ${CMAKE_CURRENT_LIST_DIR}/racecheck_ring.cu)
target_link_libraries(racecheck_ring PRIVATE ladder_common)
ladder_hopper_step(racecheck_ring)  # steps/CMakeLists.txt: sm_90 becomes the arch-specific sm_90a
set_target_properties(racecheck_ring PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bin)

foreach(variant bulk bulk_all_arrive bulk_fenced generic generic_all_arrive syncthreads bulk_syncthreads)
  add_test(NAME gpu_racecheck_ring_${variant} COMMAND racecheck_ring ${variant})
  set_tests_properties(gpu_racecheck_ring_${variant} PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 120)
endforeach()
# The broken variant releases each stage before reading it: the program must see a wrong value
# (exit 1). Any other exit fails this entry; 77 (no Hopper GPU) skips it.
add_test(NAME gpu_racecheck_ring_bulk_broken_is_caught
         COMMAND sh -c "\"$0\" bulk_broken; rc=$?; [ $rc -eq 77 ] && exit 77; [ $rc -eq 1 ] || { echo \"exit $rc, expected 1 (a wrong value seen)\"; exit 1; }"
                 $<TARGET_FILE:racecheck_ring>)
set_tests_properties(gpu_racecheck_ring_bulk_broken_is_caught PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 120)
