"""FlashAttention-4 made absent, as torch/ beside it: an installed flash_attn (flash_attn.cute) is
shadowed, so that the CPU tests run as on a machine without it."""
raise ImportError("flash_attn is made absent by tests/cpu/fake_torch/absent (the CPU tests run as without FlashAttention-4)")
