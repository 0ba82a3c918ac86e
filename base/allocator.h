// How sdgd asks the C library's allocator to behave.
#ifndef SDG_BASE_ALLOCATOR_H_
#define SDG_BASE_ALLOCATOR_H_

namespace sdg {

// Allocations of 64 KiB and more get pages of their own (mmap), given back
// to the system when freed. glibc's default puts them in the arena of the
// thread that made them and keeps the arena's pages once they are freed:
// gRPC receives a large request in 64 KiB slices on its own threads, so a
// server that took three 30 MB requests kept 75 MB it no longer used, and
// more with each (bench/durable_bench.py, "inline_memory"). With this it
// goes back to within a few MB of idle. No-op on other C libraries.
void ReturnLargeAllocationsToTheSystem();

}  // namespace sdg

#endif  // SDG_BASE_ALLOCATOR_H_
