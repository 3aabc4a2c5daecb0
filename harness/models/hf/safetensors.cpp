#include "harness/models/hf/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "harness/io/output_file.h"
#include "kernels/shared/bounded_json.h"
#include "kernels/shared/error.h"

namespace specula {
namespace {

using nlohmann::json;

struct DtypeInfo {
  SafetensorsDtype dtype;
  const char* name;
  size_t size;
};

constexpr DtypeInfo kDtypes[] = {
    {SafetensorsDtype::BOOL, "BOOL", 1},       {SafetensorsDtype::U8, "U8", 1},
    {SafetensorsDtype::I8, "I8", 1},           {SafetensorsDtype::U16, "U16", 2},
    {SafetensorsDtype::I16, "I16", 2},         {SafetensorsDtype::F16, "F16", 2},
    {SafetensorsDtype::BF16, "BF16", 2},       {SafetensorsDtype::U32, "U32", 4},
    {SafetensorsDtype::I32, "I32", 4},         {SafetensorsDtype::F32, "F32", 4},
    {SafetensorsDtype::U64, "U64", 8},         {SafetensorsDtype::I64, "I64", 8},
    {SafetensorsDtype::F64, "F64", 8},         {SafetensorsDtype::F8_E4M3, "F8_E4M3", 1},
    {SafetensorsDtype::F8_E5M2, "F8_E5M2", 1},
};

// The reference implementation refuses headers over 100 MB: a real header is a few hundred KB, and a huge
// length is a corrupt or hostile file, not one to allocate for.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

const DtypeInfo& info(SafetensorsDtype dtype) {
  for (const DtypeInfo& d : kDtypes)
    if (d.dtype == dtype) return d;
  fail("safetensors: unknown dtype enum ", static_cast<int>(dtype));
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string range_string(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + ")";
}

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Parses one header entry into `t` (data pointer set later); throws naming the tensor.
SafetensorsTensor parse_entry(const std::string& name, const json& entry, const std::string& where) {
  const std::string what = where + ": tensor '" + name + "'";
  if (!entry.is_object()) fail(what, ": header entry must be an object, got ", entry.dump());
  for (const auto& item : entry.items())
    if (item.key() != "dtype" && item.key() != "shape" && item.key() != "data_offsets")
      fail(what, ": unknown header field '", item.key(), "'");
  SafetensorsTensor t;
  t.name = name;
  const auto dtype = entry.find("dtype");
  if (dtype == entry.end() || !dtype->is_string()) fail(what, ": missing or non-string 'dtype'");
  const auto parsed = parse_safetensors_dtype(dtype->get<std::string>());
  if (!parsed) {
    std::string known;
    for (const DtypeInfo& d : kDtypes) known += std::string(known.empty() ? "" : ", ") + d.name;
    fail(what, ": unknown dtype '", dtype->get<std::string>(), "' (known: ", known, ")");
  }
  t.dtype = *parsed;
  const auto shape = entry.find("shape");
  if (shape == entry.end() || !shape->is_array()) fail(what, ": missing or non-array 'shape'");
  uint64_t numel = 1;
  for (const json& d : *shape) {
    if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<int64_t>() >= 0))
      fail(what, ": shape ", shape->dump(), " must hold non-negative integers");
    const uint64_t n = d.get<uint64_t>();
    // Bound numel so that numel x 8 bytes cannot overflow below.
    if (n != 0 && numel > (uint64_t{1} << 60) / n) fail(what, ": shape ", shape->dump(), " is impossibly large");
    numel *= n;
    t.shape.push_back(static_cast<int64_t>(n));
  }
  const auto offsets = entry.find("data_offsets");
  if (offsets == entry.end() || !offsets->is_array() || offsets->size() != 2 || !(*offsets)[0].is_number_unsigned() ||
      !(*offsets)[1].is_number_unsigned())
    fail(what, ": 'data_offsets' must be [begin, end] with non-negative integers, got ",
         offsets == entry.end() ? std::string("nothing") : offsets->dump());
  const uint64_t begin = (*offsets)[0].get<uint64_t>(), end = (*offsets)[1].get<uint64_t>();
  if (end < begin) fail(what, ": data_offsets ", offsets->dump(), " end before they begin");
  t.offset = begin;
  t.bytes = end - begin;
  if (t.bytes != numel * dtype_size(t.dtype))
    fail(what, ": data_offsets ", offsets->dump(), " span ", t.bytes, " bytes but ", dtype_name(t.dtype), " ",
         shape_string(t.shape), " needs ", numel * dtype_size(t.dtype));
  return t;
}

}  // namespace

const char* dtype_name(SafetensorsDtype dtype) { return info(dtype).name; }
size_t dtype_size(SafetensorsDtype dtype) { return info(dtype).size; }

std::optional<SafetensorsDtype> parse_safetensors_dtype(const std::string& name) {
  for (const DtypeInfo& d : kDtypes)
    if (name == d.name) return d.dtype;
  return std::nullopt;
}

int64_t SafetensorsTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, ": cannot open safetensors file: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    fail(path, ": cannot stat: ", std::strerror(e));
  }
  if (S_ISDIR(st.st_mode)) {  // a folder opens, and would read as an empty file
    ::close(fd);
    fail(path, ": is a folder, not a safetensors file");
  }
  size_ = static_cast<uint64_t>(st.st_size);
  if (size_ < 8) {
    ::close(fd);
    fail(path, ": truncated safetensors file: ", size_, " bytes, shorter than the 8-byte header length");
  }
  map_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);  // the mapping keeps the file
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    fail(path, ": cannot memory-map ", size_, " bytes: ", std::strerror(map_errno));
  }
  try {
    const auto* bytes = static_cast<const uint8_t*>(map_);
    const uint64_t header_len = read_u64_le(bytes);
    if (header_len > size_ - 8)
      fail(path, ": header length ", header_len, " is larger than the file allows (", size_,
           " bytes in all): truncated or not a safetensors file");
    if (header_len > kMaxHeaderBytes)
      fail(path, ": header length ", header_len, " exceeds the ", kMaxHeaderBytes, "-byte limit");
    const char* header = reinterpret_cast<const char*>(bytes + 8);
    if (header_len == 0 || header[0] != '{') fail(path, ": header does not start with '{' (not a safetensors file?)");
    json j;
    try {
      j = parse_bounded_json(header, header + header_len);
    } catch (const json::exception& e) {
      fail(path, ": malformed header JSON: ", e.what());
    }
    if (!j.is_object()) fail(path, ": header must be a JSON object");
    const uint64_t buffer_size = size_ - 8 - header_len;
    const uint8_t* buffer = bytes + 8 + header_len;
    for (const auto& item : j.items()) {
      if (item.key() == "__metadata__") {
        if (!item.value().is_object()) fail(path, ": __metadata__ must be an object of strings");
        for (const auto& m : item.value().items()) {
          if (!m.value().is_string()) fail(path, ": __metadata__ '", m.key(), "' must be a string");
          metadata_[m.key()] = m.value().get<std::string>();
        }
        continue;
      }
      tensors_.push_back(parse_entry(item.key(), item.value(), path));
    }
    std::sort(tensors_.begin(), tensors_.end(), [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
      return a.offset != b.offset ? a.offset < b.offset : a.bytes < b.bytes;
    });
    uint64_t covered = 0;  // the buffer's bytes [0, covered) belong to the tensors seen so far
    for (size_t i = 0; i < tensors_.size(); ++i) {
      SafetensorsTensor& t = tensors_[i];
      const uint64_t end = t.offset + t.bytes;
      if (end > buffer_size)
        fail(path, ": tensor '", t.name, "' data_offsets ", range_string(t.offset, end),
             " extend past the data buffer of ", buffer_size, " bytes (truncated file?)");
      if (i > 0 && t.offset < covered)
        fail(path, ": tensors '", tensors_[i - 1].name, "' ",
             range_string(tensors_[i - 1].offset, tensors_[i - 1].offset + tensors_[i - 1].bytes), " and '", t.name,
             "' ", range_string(t.offset, end), " overlap");
      if (t.offset > covered)
        fail(path, ": data buffer bytes ", range_string(covered, t.offset), " belong to no tensor");
      covered = end;
      t.data = buffer + t.offset;
      index_[t.name] = i;
    }
    if (covered != buffer_size)
      fail(path, ": the tensors end at byte ", covered, " of a ", buffer_size, "-byte data buffer (trailing bytes)");
  } catch (...) {
    ::munmap(map_, size_);
    map_ = nullptr;
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(map_, size_);
}

const SafetensorsTensor* SafetensorsFile::find(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

void write_safetensors(const std::string& path, const std::vector<SafetensorsWriteTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<const SafetensorsWriteTensor*> order;
  for (const auto& t : tensors) order.push_back(&t);
  std::stable_sort(order.begin(), order.end(), [](const SafetensorsWriteTensor* a, const SafetensorsWriteTensor* b) {
    const size_t sa = dtype_size(a->dtype), sb = dtype_size(b->dtype);
    return sa != sb ? sa > sb : a->name < b->name;
  });
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<uint64_t> sizes;
  uint64_t offset = 0;
  for (const SafetensorsWriteTensor* t : order) {
    if (t->name == "__metadata__") fail(path, ": '__metadata__' is not a tensor name");
    if (header.contains(t->name)) fail(path, ": tensor '", t->name, "' given twice");
    uint64_t numel = 1;
    for (int64_t d : t->shape) {
      if (d < 0) fail(path, ": tensor '", t->name, "' has a negative dimension");
      numel *= static_cast<uint64_t>(d);
    }
    const uint64_t bytes = numel * dtype_size(t->dtype);
    header[t->name] = {
        {"dtype", dtype_name(t->dtype)}, {"shape", t->shape}, {"data_offsets", {offset, offset + bytes}}};
    sizes.push_back(bytes);
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - (text.size() % 8)) % 8, ' ');  // the data buffer starts 8-byte aligned
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>((static_cast<uint64_t>(text.size()) >> (8 * i)) & 0xff);

  replace_file_atomically(path, path, [&](const std::string& tmp) {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) fail(path, ": cannot create");
    out.write(reinterpret_cast<const char*>(len), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (size_t i = 0; i < order.size(); ++i)
      out.write(static_cast<const char*>(order[i]->data), static_cast<std::streamsize>(sizes[i]));
    if (!out.flush()) fail(path, ": write failed (disk full?)");
  });
}

}  // namespace specula
