// Palladium: the Pallas kernel language in C++20. Include this one header.
#pragma once
#include "palladium/array.h"
#include "palladium/call.h"
#include "palladium/control.h"
#include "palladium/dtype.h"
#include "palladium/error.h"
#include "palladium/host_ops.h"
#include "palladium/lang.h"
#include "palladium/npy.h"
#include "palladium/random.h"
#include "palladium/ref.h"
#include "palladium/spec.h"
#include "palladium/value.h"
