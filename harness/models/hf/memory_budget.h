// How much memory a model may take: the kernel's MemAvailable estimate, and byte counts people can read.
// Torch-free.
#pragma once

#include <cstdint>
#include <string>

namespace specula {

// MemAvailable of /proc/meminfo in bytes (memory that can be allocated without swapping, page cache
// included); -1 where the file or the field is missing.
int64_t mem_available_bytes();

// "512 B", "3.4 KiB", "1.25 GiB".
std::string format_bytes(int64_t bytes);

}  // namespace specula
