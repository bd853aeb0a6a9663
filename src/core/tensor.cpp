#include "moe/tensor.h"

#include <cstring>

namespace moe {

Tensor::Tensor(Dtype dtype, std::vector<int64_t> shape) : dtype_(dtype), shape_(std::move(shape)) {
  numel_ = 1;
  for (int64_t d : shape_) {
    MOE_CHECK(d >= 0, "negative tensor dimension");
    numel_ *= d;
  }
  storage_ = std::shared_ptr<void>(aligned_alloc_bytes(bytes()), AlignedFree());
}

Tensor Tensor::zeros(Dtype dtype, std::vector<int64_t> shape) {
  Tensor t(dtype, std::move(shape));
  t.fill_zero();
  return t;
}

float Tensor::get(int64_t i) const {
  return dtype_ == Dtype::f32 ? data<float>()[i] : bf16_to_f32(data<bf16_t>()[i]);
}

void Tensor::set(int64_t i, float v) {
  if (dtype_ == Dtype::f32)
    data<float>()[i] = v;
  else
    data<bf16_t>()[i] = f32_to_bf16(v);
}

std::vector<double> Tensor::to_f64() const {
  std::vector<double> out(static_cast<size_t>(numel_));
  for (int64_t i = 0; i < numel_; ++i) out[size_t(i)] = get(i);
  return out;
}

void Tensor::fill_zero() {
  if (numel_ > 0) std::memset(raw(), 0, bytes());
}

Tensor Tensor::clone() const {
  Tensor t(dtype_, shape_);
  if (numel_ > 0) std::memcpy(t.raw(), raw(), bytes());
  return t;
}

Tensor Tensor::to(Dtype dtype) const {
  if (dtype == dtype_) return clone();
  Tensor t(dtype, shape_);
  for (int64_t i = 0; i < numel_; ++i) t.set(i, get(i));
  return t;
}

std::string Tensor::shape_string() const {
  std::string s = "(";
  for (size_t i = 0; i < shape_.size(); ++i) s += (i ? ", " : "") + std::to_string(shape_[i]);
  return s + ")";
}

}  // namespace moe
