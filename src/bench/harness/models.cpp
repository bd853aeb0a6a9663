#include "bench/harness/models.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "moe/file_io.h"
#include "moe/parse.h"

namespace moe::bench {

const std::vector<ModelPreset>& model_presets() {
  // name, hidden, mlp_dim (per expert), experts, topk, shared width, source
  static const std::vector<ModelPreset> presets = {
      // The seed's own families: their mlp-dim is one point of the logbook's sweep.
      {"qwen-like-a", 2048, 1408, 64, 2, 5632,
       "the seed's logbook 001, Qwen-like Family A (mlp-dim swept 1408-2048)"},
      {"qwen-like-b", 3072, 2048, 64, 2, 8192,
       "the seed's logbook 001, Qwen-like Family B (mlp-dim swept 2048-3072)"},
      // Published models, those with shared experts last: the numbers of the config.json each names
      // (docs/models.md).
      {"mixtral-8x7b", 4096, 14336, 8, 2, 0, "mistralai/Mixtral-8x7B-v0.1 config.json"},
      {"olmoe-1b-7b", 2048, 1024, 64, 8, 0, "allenai/OLMoE-1B-7B-0924 config.json"},
      {"qwen3-30b-a3b", 2048, 768, 128, 8, 0, "Qwen/Qwen3-30B-A3B config.json"},
      {"gpt-oss-20b", 2880, 2880, 32, 4, 0, "openai/gpt-oss-20b config.json"},
      {"gpt-oss-120b", 2880, 2880, 128, 4, 0, "openai/gpt-oss-120b config.json"},
      {"deepseek-v2-lite", 2048, 1408, 64, 6, 2816,
       "deepseek-ai/DeepSeek-V2-Lite config.json (2 shared experts of 1408)"},
      {"deepseek-v3", 7168, 2048, 256, 8, 2048,
       "deepseek-ai/DeepSeek-V3 config.json (1 shared expert of 2048)"},
      {"llama-4-scout", 5120, 8192, 16, 1, 8192,
       "meta-llama/Llama-4-Scout-17B-16E config.json (a shared expert of intermediate_size)"},
  };
  return presets;
}

const ModelPreset* find_model(const std::string& name) {
  for (const ModelPreset& m : model_presets())
    if (name == m.name) return &m;
  return nullptr;
}

std::string model_names() {
  std::string names;
  for (const ModelPreset& m : model_presets()) names += (names.empty() ? "" : ", ") + std::string(m.name);
  return names;
}

namespace {

// Where each architecture keeps the layer's numbers: hidden, expert width, routed experts, experts per
// token, and the shared expert (a key holding its width, or a count of experts of the expert width).
struct HfKeys {
  const char* model_type;
  const char *hidden, *mlp_dim, *experts, *topk;
  const char* shared_width;  // nullptr: none, or see shared_count
  const char* shared_count;  // nullptr: none
};

const HfKeys kHfKeys[] = {
    {"mixtral", "hidden_size", "intermediate_size", "num_local_experts", "num_experts_per_tok", nullptr,
     nullptr},
    {"qwen2_moe", "hidden_size", "moe_intermediate_size", "num_experts", "num_experts_per_tok",
     "shared_expert_intermediate_size", nullptr},
    {"qwen3_moe", "hidden_size", "moe_intermediate_size", "num_experts", "num_experts_per_tok", nullptr,
     nullptr},
    {"deepseek_v2", "hidden_size", "moe_intermediate_size", "n_routed_experts", "num_experts_per_tok",
     nullptr, "n_shared_experts"},
    {"deepseek_v3", "hidden_size", "moe_intermediate_size", "n_routed_experts", "num_experts_per_tok",
     nullptr, "n_shared_experts"},
    {"olmoe", "hidden_size", "intermediate_size", "num_experts", "num_experts_per_tok", nullptr, nullptr},
    {"gpt_oss", "hidden_size", "intermediate_size", "num_local_experts",
     "num_experts_per_tok|experts_per_token", nullptr, nullptr},
    // Llama 4's MoE layers have one shared expert as wide as a routed one.
    {"llama4_text", "hidden_size", "intermediate_size", "num_local_experts", "num_experts_per_tok",
     "intermediate_size", nullptr},
};

// `key` may name alternatives, "a|b": the first the config has.
Status read_count(const nlohmann::json& j, const std::string& path, const std::string& names, int64_t& out) {
  std::string key;
  for (size_t start = 0; key.empty() || !j.contains(key);) {
    if (start > names.size()) return Status::error(fmt::format("--hf-config {}: no \"{}\"", path, names));
    const size_t bar = std::min(names.find('|', start), names.size());
    key = names.substr(start, bar - start);
    start = bar + 1;
  }
  if (!j[key].is_number_integer() || j[key].get<int64_t>() < 0)
    return Status::error(fmt::format("--hf-config {}: \"{}\" is not a count", path, key));
  out = j[key].get<int64_t>();
  return Status::ok();
}

}  // namespace

Status read_hf_config(const std::string& path, ModelPreset& shape) {
  std::string text;
  MOE_RETURN_IF_ERROR(read_regular_file(path, 0, text, "--hf-config"));
  if (json_depth(text) > kMaxJsonDepth)
    return Status::error(fmt::format("--hf-config {}: nested deeper than {} levels", path, kMaxJsonDepth));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object()) return Status::error(fmt::format("--hf-config {}: not a JSON object", path));
  if (!j.contains("model_type") || !j["model_type"].is_string())
    return Status::error(fmt::format("--hf-config {}: no \"model_type\"", path));
  std::string type = j["model_type"].get<std::string>();
  if (type == "llama4") {  // the multimodal config: the language model's numbers are its text_config's
    if (!j.contains("text_config") || !j["text_config"].is_object())
      return Status::error(fmt::format("--hf-config {}: no \"text_config\"", path));
    j = j["text_config"];
    type = "llama4_text";
  }
  const HfKeys* keys = nullptr;
  for (const HfKeys& k : kHfKeys)
    if (type == k.model_type) keys = &k;
  if (!keys)
    return Status::error(fmt::format(
        "--hf-config {}: model_type \"{}\" is not a MoE architecture moe-bench reads (mixtral, qwen2_moe, "
        "qwen3_moe, deepseek_v2, deepseek_v3, olmoe, gpt_oss, llama4)",
        path, type));
  shape = ModelPreset{keys->model_type, 0, 0, 0, 0, 0, "config.json"};
  MOE_RETURN_IF_ERROR(read_count(j, path, keys->hidden, shape.hidden));
  MOE_RETURN_IF_ERROR(read_count(j, path, keys->mlp_dim, shape.mlp_dim));
  MOE_RETURN_IF_ERROR(read_count(j, path, keys->experts, shape.experts));
  MOE_RETURN_IF_ERROR(read_count(j, path, keys->topk, shape.topk));
  if (keys->shared_width)
    MOE_RETURN_IF_ERROR(read_count(j, path, keys->shared_width, shape.shared_expert_dim));
  if (keys->shared_count) {
    int64_t count = 0;
    MOE_RETURN_IF_ERROR(read_count(j, path, keys->shared_count, count));
    shape.shared_expert_dim = count * shape.mlp_dim;
  }
  return Status::ok();
}

Status expand_model_presets(std::vector<std::string>& args, std::string* model_name) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    const bool model = args[i] == "--model" || args[i].rfind("--model=", 0) == 0;
    const bool hf = args[i] == "--hf-config" || args[i].rfind("--hf-config=", 0) == 0;
    if (!model && !hf) {
      out.push_back(args[i]);
      continue;
    }
    const std::string flag = model ? "--model" : "--hf-config";
    std::string value;
    if (args[i] == flag) {
      if (i + 1 == args.size())
        return Status::error(flag + (model ? " needs a name (" + model_names() + ")" : " needs a file"));
      value = args[++i];
    } else {
      value = args[i].substr(flag.size() + 1);
    }
    ModelPreset from_file{};
    const ModelPreset* m = nullptr;
    if (model) {
      m = find_model(value);
      if (!m)
        return Status::error(fmt::format("invalid --model '{}': expected one of {}", value, model_names()));
    } else {
      MOE_RETURN_IF_ERROR(read_hf_config(value, from_file));
      m = &from_file;
    }
    if (model_name) *model_name = model ? std::string(m->name) : "hf-config:" + std::string(m->name);
    for (const std::string& f :
         {fmt::format("--hidden={}", m->hidden), fmt::format("--mlp-dim={}", m->mlp_dim),
          fmt::format("--experts={}", m->experts), fmt::format("--topk={}", m->topk),
          fmt::format("--shared-expert-dim={}", m->shared_expert_dim)})
      out.push_back(f);
  }
  args = std::move(out);
  return Status::ok();
}

}  // namespace moe::bench
