# Part IV's labs, included by labs/CMakeLists.txt (after ladder_add_lab is defined):
#   L11  the wgmma shared-memory descriptor with the 128-byte swizzle (after chapter 16)
#   L12  a TMA tensor map for a ragged tile (after chapter 17)
# Neither is an attention kernel, so neither registers a step: each checker runs its own small
# kernel and its own check (like L07's), and both are sm_90a code (HOPPER). The learner's file is
# a header (LEARNER_FILE), the kernel is given and the same in both modes.
ladder_add_lab(L11 L11_wgmma_descriptor wgmma_tile.cu check.cpp HOPPER LEARNER_FILE descriptor.hpp)
ladder_add_lab(L12 L12_tma_ragged tma_boxes.cu check.cpp HOPPER LEARNER_FILE tensor_map.hpp)

if(LADDER_BUILD_TESTS)
  # Each lab's CPU model is the lab's CPU verdict, so it is tested itself: the reference answers
  # pass, and each classic mistake is caught by the right check with its diagnosis ...
  foreach(lab IN ITEMS L11_wgmma_descriptor L12_tma_ragged)
    string(SUBSTRING ${lab} 0 3 id)
    add_executable(lab_${id}_model_selftest ${lab}/model_selftest.cpp)
    target_link_libraries(lab_${id}_model_selftest PRIVATE ladder_labs_common)
    set_target_properties(lab_${id}_model_selftest PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bin)
    add_test(NAME lab_${id}_model_selftest COMMAND lab_${id}_model_selftest)
    set_tests_properties(lab_${id}_model_selftest PROPERTIES LABELS cpu)
  endforeach()
  # ... and the untouched starters fail the model without a GPU (lab_L11_cpu and lab_L12_cpu are
  # the solutions' passes).
  if(LADDER_LABS_MODE STREQUAL "starter")
    add_test(NAME lab_L11_starter_cpu_fails COMMAND lab_L11 --cpu)
    set_tests_properties(lab_L11_starter_cpu_fails PROPERTIES LABELS cpu
                         PASS_REGULAR_EXPRESSION "model: FAIL, check 2 \\(the offset: an 8-row atom without bank conflicts\\): .* The chunk index is not XORed")
    add_test(NAME lab_L12_starter_cpu_fails COMMAND lab_L12 --cpu)
    set_tests_properties(lab_L12_starter_cpu_fails PROPERTIES LABELS cpu
                         PASS_REGULAR_EXPRESSION "model: FAIL, check 1 \\(rank and dims\\): rows = 1: rank 0")
  endif()
endif()
