#include "moe/dump.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <iterator>
#include <nlohmann/json.hpp>

#include "moe/file_io.h"
#include "moe/npy.h"

namespace moe {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

// Writes files into the dump directory and records each one in config.json's "files" map.
class DumpWriter {
 public:
  explicit DumpWriter(fs::path dir) : dir_(std::move(dir)) {}

  Status tensor(const std::string& name, const Tensor& t) {
    MOE_RETURN_IF_ERROR(write_npy(path(name), t));
    record(name, t.shape(), dtype_name(t.dtype()), npy_descr(t.dtype()));
    return Status::ok();
  }
  template <typename T>
  Status vector(const std::string& name, const std::vector<T>& v, const std::vector<int64_t>& shape,
                const char* dtype, const char* descr) {
    MOE_RETURN_IF_ERROR(write_npy(path(name), v, shape));
    record(name, shape, dtype, descr);
    return Status::ok();
  }

  Json& files() { return files_; }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

 private:
  void record(const std::string& name, const std::vector<int64_t>& shape, const char* dtype,
              const char* descr) {
    files_[name] = {{"shape", shape}, {"dtype", dtype}, {"npy_descr", descr}};
  }

  fs::path dir_;
  Json files_ = Json::object();
};

Status prepare_dir(const fs::path& dir) {
  MOE_RETURN_IF_ERROR(prepare_output_dir("dump directory", dir.string()));
  std::error_code ec;
  // A config.json left by an earlier dump would vouch for files this one has not finished writing.
  fs::remove(dir / "config.json", ec);
  if (ec)
    return Status::error(
        fmt::format("cannot replace '{}': {}", (dir / "config.json").string(), ec.message()));
  return Status::ok();
}

// Every file a dump may hold besides config.json. A dump into the folder of an earlier one removes
// those of them it does not write (a forward dump over a forward_backward one: the stale grad_*.npy),
// so the folder never mixes two runs; files of other names are not ours and stay.
const char* const kDumpFiles[] = {"x.npy",
                                  "w1.npy",
                                  "w2.npy",
                                  "w3.npy",
                                  "shared_w1.npy",
                                  "shared_w2.npy",
                                  "shared_w3.npy",
                                  "topk_ids.npy",
                                  "topk_weights.npy",
                                  "out.npy",
                                  "grad_x.npy",
                                  "grad_w1.npy",
                                  "grad_w2.npy",
                                  "grad_w3.npy",
                                  "grad_shared_w1.npy",
                                  "grad_shared_w2.npy",
                                  "grad_shared_w3.npy"};

Status remove_stale(const fs::path& dir, const Json& written) {
  for (const char* name : kDumpFiles) {
    if (written.contains(name)) continue;
    std::error_code ec;
    fs::remove(dir / name, ec);
    if (ec)
      return Status::error(
          fmt::format("cannot remove the earlier dump's '{}': {}", (dir / name).string(), ec.message()));
  }
  return Status::ok();
}

}  // namespace

Status write_dump(const std::string& dir, const MoeConfig& cfg, const std::string& extra_json_fields,
                  const MoeInputs& in, const Routing& routing, const Tensor& out, const MoeGrads* grads) {
  Json extra = Json::parse(extra_json_fields, nullptr, /*allow_exceptions=*/false);
  MOE_CHECK(extra.is_object(), "write_dump: extra_json_fields is not a JSON object: " + extra_json_fields);
  MOE_RETURN_IF_ERROR(prepare_dir(dir));

  DumpWriter w{fs::path(dir)};
  MOE_RETURN_IF_ERROR(w.tensor("x.npy", in.x));
  MOE_RETURN_IF_ERROR(w.tensor("w1.npy", in.w1));
  MOE_RETURN_IF_ERROR(w.tensor("w2.npy", in.w2));
  MOE_RETURN_IF_ERROR(w.tensor("w3.npy", in.w3));
  if (cfg.has_shared()) {
    MOE_RETURN_IF_ERROR(w.tensor("shared_w1.npy", in.sw1));
    MOE_RETURN_IF_ERROR(w.tensor("shared_w2.npy", in.sw2));
    MOE_RETURN_IF_ERROR(w.tensor("shared_w3.npy", in.sw3));
  }
  const std::vector<int64_t> tk = {routing.tokens, routing.topk};
  MOE_RETURN_IF_ERROR(w.vector("topk_ids.npy", routing.ids, tk, "int32", "<i4"));
  MOE_RETURN_IF_ERROR(w.vector("topk_weights.npy", routing.weights, tk, "float32", "<f4"));
  MOE_RETURN_IF_ERROR(w.tensor("out.npy", out));
  if (grads) {
    MOE_RETURN_IF_ERROR(w.tensor("grad_x.npy", grads->dx));
    MOE_RETURN_IF_ERROR(w.tensor("grad_w1.npy", grads->dw1));
    MOE_RETURN_IF_ERROR(w.tensor("grad_w2.npy", grads->dw2));
    MOE_RETURN_IF_ERROR(w.tensor("grad_w3.npy", grads->dw3));
    if (cfg.has_shared()) {
      MOE_RETURN_IF_ERROR(w.tensor("grad_shared_w1.npy", grads->dsw1));
      MOE_RETURN_IF_ERROR(w.tensor("grad_shared_w2.npy", grads->dsw2));
      MOE_RETURN_IF_ERROR(w.tensor("grad_shared_w3.npy", grads->dsw3));
    }
  }

  MOE_RETURN_IF_ERROR(remove_stale(fs::path(dir), w.files()));
  for (auto it = w.files().begin(); it != w.files().end(); ++it)
    MOE_CHECK(std::find(std::begin(kDumpFiles), std::end(kDumpFiles), it.key()) != std::end(kDumpFiles),
              "every dump file is in kDumpFiles: " + it.key());

  Json config = Json::parse(cfg.to_json());
  config.update(extra);
  config["files"] = std::move(w.files());
  config["notes"] = {
      "Every float tensor is stored as float32 (npy '<f4'), a float16 run's as float16 ('<f2'); 'dtype' in "
      "'files' is the run's dtype. bfloat16 tensors were widened to float32 exactly, so narrowing them back "
      "recovers the original values bit for bit.",
      "topk_ids values >= 'experts' are null routing slots: those assignments go to no expert.",
      "Gradients, when present, are of loss = mean(square(out)).",
  };
  return write_file_atomic(w.path("config.json"), config.dump(2) + "\n");
}

}  // namespace moe
