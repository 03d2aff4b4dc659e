/*
 * mdsl AscendC emulation: the kernel API header.
 *
 * Generated kernels `#include "kernel_operator.h"`; with -I pointing at this folder,
 * g++ compiles them for the CPU. See mdsl_emu/core.h for what is emulated and checked.
 */
#pragma once

#include "mdsl_emu/core.h"
#include "mdsl_emu/tensor.h"
#include "mdsl_emu/copy.h"
#include "mdsl_emu/vector.h"
#include "kernel_tiling/kernel_tiling.h"

#define KERNEL_TASK_TYPE_DEFAULT(type)
#define KERNEL_TYPE_AIV_ONLY 0
#define KERNEL_TYPE_AIC_ONLY 1
#define KERNEL_TYPE_MIX_AIC_1_2 2
