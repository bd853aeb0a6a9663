// --model NAME: the MoE layer of a published model as the shape flags it sets (hidden, expert width,
// routed experts, experts per token, shared expert width). A preset stands where it is given among the
// flags: later flags override it, earlier ones it overrides (`--model qwen3-30b-a3b --topk 4`). Facts
// only, each from the config its `source` names (docs/models.md); attention and the rest of the model are
// not the block's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moe/status.h"

namespace moe::bench {

struct ModelPreset {
  const char* name;
  int64_t hidden, mlp_dim, experts, topk, shared_expert_dim;
  const char* source;  // the config the numbers come from
};

const std::vector<ModelPreset>& model_presets();
const ModelPreset* find_model(const std::string& name);
// "mixtral-8x7b, olmoe-1b-7b, ...": for messages and --help.
std::string model_names();

// The shape of the MoE layer a Hugging Face config.json describes, under the keys of its `model_type`
// (mixtral, qwen2_moe, qwen3_moe, deepseek_v2, deepseek_v3, olmoe, gpt_oss, llama4 / llama4_text; a
// llama4 config's text_config). An unknown model_type, a missing key or a value of another type is one line
// naming the file and key.
// shape.name is the architecture's model_type as read ("llama4_text" for llama4's text_config).
Status read_hf_config(const std::string& path, ModelPreset& shape);

// Replaces each `--model NAME` / `--model=NAME` and `--hf-config FILE` / `--hf-config=FILE` of `args`
// (program name excluded) by the shape flags it stands for, in its place; an unknown name is one line
// naming the choices. `model` (where given) is set to the last one's name: the preset's, or "hf-config:" and
// the file's model_type; else left as it is.
Status expand_model_presets(std::vector<std::string>& args, std::string* model = nullptr);

}  // namespace moe::bench
