// Binding entry points of a library opened with dlopen (the CUDA driver, NVRTC, NCCL): each slot
// takes the first of its names the library has; the missing ones are listed for the message.
#pragma once
#include <dlfcn.h>

#include <initializer_list>
#include <string>

namespace palladium::backend {

template <class F> bool bind(void* lib, F& slot, std::initializer_list<const char*> names, std::string& missing) {
  for (const char* n : names) {
    if (void* p = dlsym(lib, n)) {
      slot = reinterpret_cast<F>(p);
      return true;
    }
  }
  missing += std::string(missing.empty() ? "" : ", ") + *names.begin();
  return false;
}

}  // namespace palladium::backend
