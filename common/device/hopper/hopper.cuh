// The Hopper pieces of a Part IV-VII forward kernel in one include: the warpgroup roles and named
// barriers, the mbarrier ring, TMA, wgmma and the two products, the softmax arithmetic, the tile
// schedulers, and the persistent skeleton (persistent.cuh: the producer and the TMA-store
// epilogue; launch.cuh: the host side).
#pragma once

#include "common/device/hopper/arch.cuh"
#include "common/device/hopper/attention.cuh"
#include "common/device/hopper/barriers.cuh"
#include "common/device/hopper/gemm.cuh"
#include "common/device/hopper/launch.cuh"
#include "common/device/hopper/mbarrier.cuh"
#include "common/device/hopper/persistent.cuh"
#include "common/device/hopper/pipeline.cuh"
#include "common/device/hopper/shared_storage.cuh"
#include "common/device/hopper/smem.cuh"
#include "common/device/hopper/tile_scheduler.cuh"
#include "common/device/hopper/tma.cuh"
#include "common/device/hopper/varlen_scheduler.cuh"
#include "common/device/hopper/wgmma.cuh"
