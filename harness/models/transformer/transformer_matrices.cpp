// The model's matrices as they sit in memory (dtype, panels, huge pages), the checks of loaded values and x times
// a matrix (apply_linear), as transformer_model.h declares them.
#include <malloc.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "harness/io/log.h"
#include "harness/models/transformer/huge_page_buffer.h"
#include "harness/models/transformer/memory_budget.h"
#include "harness/models/transformer/skinny_linear.h"
#include "harness/models/transformer/transformer_model.h"
#include "harness/models/transformer/weight_panels.h"
#include "harness/models/transformer/weight_view.h"
#include "kernels/shared/error.h"

namespace specula {

WeightView weight_view(const torch::Tensor& w) {
  if (!w.defined() || !w.device().is_cpu() || !w.is_contiguous() || !(w.dim() == 2 || is_packed_matrix(w))) return {};
  const WeightLayout layout = w.dim() == 3 ? WeightLayout::panels : WeightLayout::row_major;
  switch (w.scalar_type()) {
    case torch::kFloat32:
      return {w.data_ptr(), WeightDtype::float32, layout};
    case torch::kFloat16:
      return {w.data_ptr(), WeightDtype::float16, layout};
    case torch::kBFloat16:
      return {w.data_ptr(), WeightDtype::bfloat16, layout};
    default:
      return {};
  }
}

bool is_packed_matrix(const torch::Tensor& w) { return w.defined() && w.dim() == 3 && w.size(2) == kPanelOutputs; }

int64_t matrix_outputs(const torch::Tensor& w) { return is_packed_matrix(w) ? w.size(0) * w.size(2) : w.size(0); }

torch::Tensor row_major_matrix(const torch::Tensor& w) {
  return is_packed_matrix(w) ? w.permute({0, 2, 1}).reshape({matrix_outputs(w), w.size(1)}) : w;
}

int64_t pack_matrices_for_decoding(torch::nn::Module& model) {
  if (decoding_weight_layout() != WeightLayout::panels) return 0;
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> packed;
  for (auto& p : model.named_parameters()) {
    torch::Tensor w = p.value();
    if (w.dim() != 2 || w.size(0) % kPanelOutputs != 0 || !w.device().is_cpu() || !w.is_contiguous() ||
        !weight_view(w).data)
      continue;
    const int64_t out = w.size(0), in = w.size(1);
    pack_into_panels(w.data_ptr(), out, in, w.element_size());
    w.set_data(w.view({out / kPanelOutputs, in, kPanelOutputs}));
    packed.push_back(w);
  }
  return decoding_weights_on_huge_pages() ? move_to_huge_pages(packed) : 0;
}

int64_t move_to_huge_pages(const std::vector<torch::Tensor>& matrices) {
  // One buffer, each matrix at a 64-byte boundary in the order given (parameter order: the blocks' matrices in
  // the order a step reads them, a tied embedding first).
  auto slot_bytes = [](const torch::Tensor& w) { return (w.nbytes() + 63) / 64 * 64; };
  size_t total = 0;
  for (const torch::Tensor& w : matrices) {
    if (!w.device().is_cpu() || !w.is_contiguous())
      fail("move_to_huge_pages: a ", w.sizes(), " matrix is not a contiguous CPU tensor");
    total += slot_bytes(w);
  }
  // Under one huge page of matrices (a draft head, a test model) the buffer would round up to a whole 2 MB page,
  // and so few 4 KB pages stay within the TLB's reach anyway.
  if (total < static_cast<size_t>(kHugePageBytes)) return 0;
  std::shared_ptr<HugePageBuffer> buffer;
  try {
    buffer = std::make_shared<HugePageBuffer>(total);
  } catch (const Error& e) {  // the weights are loaded and usable where they are: keep them there
    log(LogLevel::warn, e.what(), "; the weights stay on the allocator's pages");
    return 0;
  }
  char* at = static_cast<char*>(buffer->data());
  torch::NoGradGuard no_grad;
  c10::InferenceMode normal_tensors(false);  // the matrices stay usable outside inference mode
  for (torch::Tensor w : matrices) {
    std::memcpy(at, w.data_ptr(), w.nbytes());
    w.set_data(torch::from_blob(
        at, w.sizes(), [buffer](void*) {}, w.options()));
    at += slot_bytes(w);
  }
  // Each matrix's old storage was freed when its tensor let go of it; matrices under glibc's mmap threshold
  // (32 MB at most) were on the heap, which returns freed memory to the system only when trimmed.
  malloc_trim(0);
  return static_cast<int64_t>(total);
}

bool has_packed_matrices(const torch::nn::Module& model) {
  for (const auto& p : model.parameters())
    if (is_packed_matrix(p)) return true;
  return false;
}

namespace {
thread_local bool libtorch_operations_only = false;
}  // namespace

LibTorchOperationsOnly::LibTorchOperationsOnly(bool on) : before_(libtorch_operations_only) {
  if (on) libtorch_operations_only = true;
}
LibTorchOperationsOnly::~LibTorchOperationsOnly() { libtorch_operations_only = before_; }
bool LibTorchOperationsOnly::active() { return libtorch_operations_only; }

torch::Tensor apply_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  const int64_t in = weight.size(1), out = matrix_outputs(weight);
  const WeightView w = weight_view(weight);
  const bool torch_only = LibTorchOperationsOnly::active();
  const bool kernel_fits = !torch_only && !torch::GradMode::is_enabled() && x.device().is_cpu() && w.data &&
                           x.scalar_type() == torch::kFloat32 &&
                           (!bias.defined() || bias.scalar_type() == torch::kFloat32) && x.dim() >= 1 &&
                           x.size(-1) == in;
  // A 16-bit or packed matrix on the CPU at inference always goes through the kernel, 32 rows at a time:
  // widening or unpacking it for LibTorch's gemm would allocate and write a float32 row-major copy of every
  // matrix on every call (a prompt, a tree of more than 32 nodes), a cost only such calls would pay.
  const bool skinny = kernel_fits && (x.numel() <= kSkinnyLinearMaxRows * in || w.dtype != WeightDtype::float32 ||
                                      w.layout == WeightLayout::panels);
  // Off the CPU (a GPU) at inference a 16-bit matrix stays 16-bit: the rows are rounded to its dtype and the GEMM
  // (cuBLAS, float32 accumulation) reads the matrix as stored, half the bytes of a widened copy that would also be
  // written anew on every call. The result returns to float32, which everything between the GEMMs keeps.
  if (!torch::GradMode::is_enabled() && (!x.device().is_cpu() || torch_only) &&
      weight.scalar_type() != x.scalar_type() && !is_packed_matrix(weight)) {
    const torch::ScalarType stored = weight.scalar_type();
    return torch::nn::functional::linear(x.to(stored), weight, bias.defined() ? bias.to(stored) : bias)
        .to(x.scalar_type());
  }
  if (!skinny) {  // a 16-bit matrix is widened for LibTorch's gemm (exactly: every 16-bit value is a float32)
    const torch::Tensor plain = row_major_matrix(weight);
    return torch::nn::functional::linear(x, plain.scalar_type() == x.scalar_type() ? plain : plain.to(x.scalar_type()),
                                         bias);
  }
  const torch::Tensor xc = x.contiguous();
  const torch::Tensor b = bias.defined() ? bias.contiguous() : bias;
  const int64_t rows = in > 0 ? xc.numel() / in : 0;
  std::vector<int64_t> sizes = x.sizes().vec();
  sizes.back() = out;
  torch::Tensor y = torch::empty(sizes, x.options());
  const float* xp = xc.data_ptr<float>();
  const float* bp = b.defined() ? b.data_ptr<float>() : nullptr;
  float* yp = y.data_ptr<float>();
  // Blocks of 64 output columns per task: ~64 KB of weights at d = 256, enough work to amortise a thread.
  constexpr int64_t kBlock = 64;
  at::parallel_for(0, (out + kBlock - 1) / kBlock, 1, [&](int64_t first, int64_t last) {
    for (int64_t r = 0; r < rows; r += kSkinnyLinearMaxRows)  // each weight block read once per 32 rows
      skinny_linear(xp + r * in, std::min(kSkinnyLinearMaxRows, rows - r), in, w, bp, out, yp + r * out, first * kBlock,
                    std::min(out, last * kBlock));
  });
  return y;
}

void store_matrices_as(torch::nn::Module& model, torch::ScalarType dtype) {
  if (dtype != torch::kFloat32 && dtype != torch::kFloat16 && dtype != torch::kBFloat16)
    fail("store_matrices_as: ", dtype_string(dtype), " is not float32, float16 or bfloat16");
  torch::NoGradGuard no_grad;
  for (auto& p : model.named_parameters())
    if (p.value().dim() >= 2 && p.value().scalar_type() != dtype) p.value().set_data(p.value().to(dtype).contiguous());
}

bool all_finite(const torch::Tensor& t) {
  const torch::Tensor flat = t.contiguous().view(-1);
  for (int64_t i = 0; i < flat.numel(); i += kLoadChunkElements)
    if (!torch::isfinite(flat.narrow(0, i, std::min(kLoadChunkElements, flat.numel() - i))).all().item<bool>())
      return false;
  return true;
}

void copy_finite(torch::Tensor dest, const torch::Tensor& src, const std::string& file, const std::string& name) {
  dest.copy_(src);
  if (all_finite(dest)) return;
  if (!all_finite(src)) fail(file, ": tensor '", name, "' holds NaN or inf");
  fail(file, ": tensor '", name, "' overflows ", dtype_string(dest.scalar_type()), ", the dtype it is kept in");
}

int64_t resident_bytes(const torch::nn::Module& model) {
  int64_t bytes = 0;
  for (const auto& p : model.parameters()) bytes += p.numel() * static_cast<int64_t>(p.element_size());
  for (const auto& b : model.buffers()) bytes += b.numel() * static_cast<int64_t>(b.element_size());
  return bytes;
}

std::string dtype_string(torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kFloat32:
      return "float32";
    case torch::kFloat16:
      return "float16";
    case torch::kBFloat16:
      return "bfloat16";
    default:
      return c10::toString(dtype);
  }
}

torch::ScalarType weights_dtype_for(const std::string& requested, torch::ScalarType stored) {
  if (requested == "auto") return stored;
  if (requested == "float32") return torch::kFloat32;
  if (requested == "float16") return torch::kFloat16;
  if (requested == "bfloat16") return torch::kBFloat16;
  fail_parameter("weights_dtype", ": '", requested, "' is not float32, bfloat16, float16 or auto");
}

void place_for_libtorch_operations(Transformer& model, const torch::Device& device) {
  model->set_decode_step(false);
  model->to(device);
}

torch::Device torch_device_named(const std::string& name) {
  std::optional<torch::Device> device;
  try {
    device = torch::Device(name);
  } catch (const c10::Error&) {
    fail("device '", name, "' is not a device (cpu, cuda, cuda:N)");
  }
  if (device->is_cuda() && !torch::cuda::is_available())
    fail("device '", name,
         "': this LibTorch cannot use CUDA (Debian's libtorch is built for the CPU only, or no "
         "GPU is visible); use cpu");
  if (!device->is_cpu() && !device->is_cuda()) fail("device '", name, "' is not supported (cpu, cuda, cuda:N)");
  return *device;
}

}  // namespace specula
