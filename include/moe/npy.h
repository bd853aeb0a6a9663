// NumPy .npy files (format 1.0), so dumps reload in any framework with np.load. Files are
// little-endian, C order, and byte-identical to what numpy >= 1.23 writes: header dict
// "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }", growth-axis spare spaces, padded so
// the data starts at a multiple of 64 bytes. Writers are atomic (moe/file_io.h), so a
// reader never sees a half-written file. The readers parse what these writers produce (tests, tools);
// they are not a general .npy loader (no version 2.0/3.0, no Fortran order, no other dtypes).
// I/O failures are user errors (bad path, full disk): a Status naming the path and the reason.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moe/status.h"
#include "moe/tensor.h"

namespace moe {

// npy_descr(t.dtype()) with t's shape: float32 and float16 ('<f2') as they are, bf16 (not a numpy dtype)
// widened to float32, which is exact.
Status write_npy(const std::string& path, const Tensor& t);
// What write_npy stores a tensor of dt as: '<f4' for float32 and bfloat16, '<f2' for float16.
const char* npy_descr(Dtype dt);
// data (prod(shape)) in C order; an empty shape writes a scalar. A size mismatch is a bug (MOE_CHECK).
Status write_npy(const std::string& path, const std::vector<int32_t>& data,
                 const std::vector<int64_t>& shape);
Status write_npy(const std::string& path, const std::vector<float>& data, const std::vector<int64_t>& shape);
Status write_npy(const std::string& path, const std::vector<double>& data, const std::vector<int64_t>& shape);

// descr as numpy spells it ('<f4', '<i4', '<f8'), shape () for a scalar.
Status read_npy_header(const std::string& path, std::string& descr, std::vector<int64_t>& shape);
// Fail unless the file holds exactly the named dtype.
Status read_npy_f32(const std::string& path, std::vector<float>& data, std::vector<int64_t>& shape);
Status read_npy_f16(const std::string& path, std::vector<f16_t>& data, std::vector<int64_t>& shape);
Status read_npy_i32(const std::string& path, std::vector<int32_t>& data, std::vector<int64_t>& shape);
Status read_npy_f64(const std::string& path, std::vector<double>& data, std::vector<int64_t>& shape);

}  // namespace moe
