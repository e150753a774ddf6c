# Part IV's labs, included by labs/CMakeLists.txt (after ladder_add_lab and ladder_lab_model_tests):
#   L11  the wgmma shared-memory descriptor with the 128-byte swizzle (after chapter 16)
#   L12  a TMA tensor map for a ragged tile (after chapter 17)
# Neither is an attention kernel, so neither registers a step: each checker runs its own small
# kernel and its own check (like L07's), and both are sm_90a code (HOPPER). The learner's file is
# a header (LEARNER_FILE), the kernel is given and the same in both modes.
ladder_add_lab(L11 L11_wgmma_descriptor wgmma_tile.cu check.cpp HOPPER LEARNER_FILE descriptor.hpp)
ladder_add_lab(L12 L12_tma_ragged tma_boxes.cu check.cpp HOPPER LEARNER_FILE tensor_map.hpp)

# L11: the layout and the descriptor; the starter's chunk index is not swizzled.
ladder_lab_model_tests(L11 L11_wgmma_descriptor "model: FAIL, check 2 \\(the offset: an 8-row atom without bank conflicts\\): .* The chunk index is not XORed")
# L12: the map's arguments against the driver's rules; the starter's map has no rank.
ladder_lab_model_tests(L12 L12_tma_ragged "model: FAIL, check 1 \\(rank and dims\\): rows = 1: rank 0")
