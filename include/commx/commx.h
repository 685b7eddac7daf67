// Umbrella header: everything a commx user needs.
#pragma once
#include "commx/backend.h"
#include "commx/comm.h"
#include "commx/error.h"
#include "commx/numeric.h"
#include "commx/options.h"
#include "commx/store.h"
#include "commx/tensor.h"
#include "commx/types.h"
#include "commx/work.h"
