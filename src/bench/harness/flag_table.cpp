#include "bench/harness/flag_table.h"

#include "moe/python_repr.h"

namespace moe::bench {

CLI::Option* FlagTable::add(const std::string& name, double& target, const std::string& help) {
  return add_text(name, python_float(target), help,
                  [&target, name](std::string_view text) { return parse_double(name, text, target); })
      ->type_name("FLOAT");
}

CLI::Option* FlagTable::add_text(const std::string& name, std::string default_text, const std::string& help,
                                 std::function<Status(std::string_view)> store) {
  Flag& f = flags_.emplace_back(Flag{name, std::move(default_text), std::move(store)});
  return app_.add_option(name, f.text, help)->capture_default_str();
}

Status FlagTable::convert() const {
  for (const Flag& f : flags_)
    if (app_.count(f.name) > 0) MOE_RETURN_IF_ERROR(f.store(f.text));
  return Status::ok();
}

}  // namespace moe::bench
