// Build provenance for result rows and --version: the git commit (read when CMake configures; the
// build scripts reconfigure on every build) and the project version.
#pragma once

namespace moe {
const char* build_git_commit();
const char* build_version();
}  // namespace moe
