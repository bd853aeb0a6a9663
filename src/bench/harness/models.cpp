#include "bench/harness/models.h"

#include <fmt/format.h>

namespace moe::bench {

const std::vector<ModelPreset>& model_presets() {
  // name, hidden, mlp_dim (per expert), experts, topk, shared width, source
  static const std::vector<ModelPreset> presets = {
      {"qwen-like-a", 2048, 1408, 64, 2, 5632,
       "the seed's logbook 001, Qwen-like Family A (mlp-dim swept 1408-2048)"},
      {"qwen-like-b", 3072, 2048, 64, 2, 8192,
       "the seed's logbook 001, Qwen-like Family B (mlp-dim swept 2048-3072)"},
      {"mixtral-8x7b", 4096, 14336, 8, 2, 0, "mistralai/Mixtral-8x7B-v0.1 config.json"},
      {"olmoe-1b-7b", 2048, 1024, 64, 8, 0, "allenai/OLMoE-1B-7B-0924 config.json"},
      {"qwen3-30b-a3b", 2048, 768, 128, 8, 0, "Qwen/Qwen3-30B-A3B config.json"},
      {"deepseek-v2-lite", 2048, 1408, 64, 6, 2816,
       "deepseek-ai/DeepSeek-V2-Lite config.json (2 shared experts of 1408)"},
      {"deepseek-v3", 7168, 2048, 256, 8, 2048,
       "deepseek-ai/DeepSeek-V3 config.json (1 shared expert of 2048)"},
      {"gpt-oss-20b", 2880, 2880, 32, 4, 0, "openai/gpt-oss-20b config.json"},
      {"gpt-oss-120b", 2880, 2880, 128, 4, 0, "openai/gpt-oss-120b config.json"},
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

Status expand_model_presets(std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string name;
    if (args[i].rfind("--model=", 0) == 0) {
      name = args[i].substr(8);
    } else if (args[i] == "--model") {
      if (i + 1 == args.size()) return Status::error("--model needs a name (" + model_names() + ")");
      name = args[++i];
    } else {
      out.push_back(args[i]);
      continue;
    }
    const ModelPreset* m = find_model(name);
    if (!m)
      return Status::error(fmt::format("invalid --model '{}': expected one of {}", name, model_names()));
    for (const std::string& flag :
         {fmt::format("--hidden={}", m->hidden), fmt::format("--mlp-dim={}", m->mlp_dim),
          fmt::format("--experts={}", m->experts), fmt::format("--topk={}", m->topk),
          fmt::format("--shared-expert-dim={}", m->shared_expert_dim)})
      out.push_back(flag);
  }
  args = std::move(out);
  return Status::ok();
}

}  // namespace moe::bench
