// A small JSON record of our own that processes share (auto's tuning file, the machine's kept peaks): read
// whole under the file's shared lock, edited whole under its exclusive lock (file_io.h's read_locked and
// edit_locked: a new file renamed over the old). What is not ours is never overwritten.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "moe/status.h"

namespace moe {

// Why a parsed document is not a record of ours ("" where it is).
using JsonRecordCheck = std::function<std::string(const nlohmann::json& doc)>;

// The record at `path` in `doc`: an empty object where the file is missing or empty; an error with the
// reason where it cannot be read, is nested deeper than kMaxJsonDepth, is not JSON or not ours.
Status read_json_record(const std::string& path, std::string_view what, const JsonRecordCheck& not_ours,
                        nlohmann::json& doc);

// Creates the file's directory where missing, then runs `edit` on the record under the lock: on `fresh`
// where the file is empty, else on what is there, refused (an error, nothing written) where that is not
// ours. `edit` returns false to leave the file as it is.
Status edit_json_record(const std::string& path, std::string_view what, const JsonRecordCheck& not_ours,
                        const nlohmann::ordered_json& fresh,
                        const std::function<bool(nlohmann::ordered_json& doc)>& edit);

}  // namespace moe
