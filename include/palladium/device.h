// Devices and explicit transfers. Arrays live on the host (Device{cpu}) unless moved to a GPU with
// to_device; a pallas_call whose inputs are on a GPU runs there and leaves its outputs there (no
// copies), while one given host Arrays copies them in and its results back out. Device work is
// queued on the current stream of its device (palladium/stream.h).
#pragma once
#include <string>

#include "palladium/array.h"
#include "palladium/stream.h"

namespace palladium {

// Number of CUDA devices usable here (0 without the driver or a GPU).
int cuda_device_count();
// Why CUDA devices cannot be used here ("" when they can).
std::string cuda_unavailable_reason();
// cuda:index; throws Error if there is no such device.
Device cuda_device(int index = 0);
// "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs)"
std::string device_description(Device d);

// A copy of `a` on device `d` (a plain device allocation; to_device(a, cpu) copies to the host).
// From the host it returns once the copy is done; between devices it is queued, never through the host.
Array to_device(const Array& a, Device d);
// A host copy of `a` (a itself if it is already on the host), after all queued work that used `a`.
Array to_host(const Array& a);
// An uninitialised Array on `d`, its memory ordered for d's current stream.
Array empty(Shape shape, DType dtype, Device d);
// Copies `src`'s elements into `dst`'s existing buffer (same shape and dtype; any devices), in order
// on dst's device's current stream after the work that made `src`: for results that must land in
// memory another library owns (an XLA output buffer, a torch tensor). Returns once a copy to the
// host is done; a copy on or between devices is queued.
void copy_into(const Array& src, const Array& dst);
// Waits until all work queued on `d`, on every stream, is done; raises any device fault as an Error.
void synchronize(Device d);

// Forgets the compiled CUDA kernels held in memory (the on-disk cache stays): the next compile of
// a kernel reloads it from disk. For measuring compile and cache times.
void clear_compiled_kernels();

}  // namespace palladium
