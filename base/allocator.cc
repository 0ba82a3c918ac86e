#include "base/allocator.h"

#include <cstdlib>  // defines __GLIBC__ with glibc

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace sdg {

void ReturnLargeAllocationsToTheSystem() {
#if defined(__GLIBC__)
  // A fixed threshold also turns off glibc's dynamic one, which would rise
  // after the first large free and put later large blocks back in arenas.
  mallopt(M_MMAP_THRESHOLD, 64 << 10);
#endif
}

}  // namespace sdg
