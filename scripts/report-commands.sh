# shellcheck shell=bash
# Sourced by the scripts that regenerate a docs/results report from the rows they run (ep-vs-dp.sh,
# gpu-tables.sh): `run CMD...` runs one command (its rows appended to $new_rows, the new store) and
# records it, with $new_rows shown as $rows (where the store ends up), in $cmds; `section_commands`
# prints the commands recorded since the last call as a code block, for the report.
run() {
  echo "$*" | sed "s|$new_rows|$rows|" >>"$cmds"
  "$@" >/dev/null
}
section_commands() {
  echo '```'
  cat "$cmds"
  echo '```'
  : >"$cmds"
}
