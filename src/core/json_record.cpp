#include "moe/json_record.h"

#include <fmt/format.h>

#include <filesystem>

#include "moe/file_io.h"
#include "moe/parse.h"

namespace moe {

Status read_json_record(const std::string& path, std::string_view what, const JsonRecordCheck& not_ours,
                        nlohmann::json& doc) {
  doc = nlohmann::json::object();
  std::error_code ec;
  if (path.empty() || !std::filesystem::exists(path, ec)) return Status::ok();
  std::string text;
  // Read-only under the shared lock: a record we may only read still says what it holds.
  MOE_RETURN_IF_ERROR(read_locked(path, what, text));
  if (text.empty()) return Status::ok();
  if (json_depth(text) > kMaxJsonDepth)
    return Status::error(fmt::format("nested deeper than {} levels", kMaxJsonDepth));
  doc = nlohmann::json::parse(text, nullptr, false);
  if (doc.is_discarded()) return Status::error("not JSON");
  if (std::string why = not_ours(doc); !why.empty()) return Status::error(why);
  return Status::ok();
}

Status edit_json_record(const std::string& path, std::string_view what, const JsonRecordCheck& not_ours,
                        const nlohmann::ordered_json& fresh,
                        const std::function<bool(nlohmann::ordered_json& doc)>& edit) {
  std::error_code ec;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty() && !std::filesystem::is_directory(parent, ec) &&
      !std::filesystem::create_directories(parent, ec))
    return Status::error("cannot create its directory: " + ec.message());
  return edit_locked(path, what, [&](std::string& text) {
    nlohmann::ordered_json doc = fresh;
    if (!text.empty()) {
      // Another process may have left something that is not ours since we read it: leave it alone.
      if (json_depth(text) > kMaxJsonDepth || !not_ours(nlohmann::json::parse(text, nullptr, false)).empty())
        return Status::error(fmt::format("changed into something that is not our {}", what));
      doc = nlohmann::ordered_json::parse(text);
    }
    if (edit(doc)) text = doc.dump(1) + "\n";
    return Status::ok();
  });
}

}  // namespace moe
