#!/usr/bin/env bash
# Checks that the guide cannot go stale against the code:
#  (a) docs/commands.md has one `## `batchcast CMD`` heading for each
#      subcommand `batchcast --help` lists, and none it does not list;
#  (b) every crate (crates/*/Cargo.toml) is on the README's map of the parts
#      (the section "## The parts").
# Uses target/debug/batchcast, building it with cargo when it is absent.
set -euo pipefail
cd "$(dirname "$0")/.."

commands_page=docs/commands.md
readme=README.md
map_heading='## The parts'
bin=target/debug/batchcast
failed=0

fail() {
  echo "check-docs: $*" >&2
  failed=1
}

if [ ! -x "$bin" ]; then
  echo "check-docs: $bin is missing; building it (cargo build -p batchcast-cli)"
  cargo build --locked -p batchcast-cli
fi

# (a) the command list.
help_text=$("$bin" --help)
cli_commands=$(printf '%s\n' "$help_text" |
  awk '/^Commands:/ { on = 1; next } on && /^[^ ]/ { on = 0 } on && NF { print $1 }' |
  { grep -vx help || true; } | sort -u)
if [ -z "$cli_commands" ]; then
  fail "found no commands in \`$bin --help\` (is its \"Commands:\" section still there?)"
fi
[ -f "$commands_page" ] || { fail "$commands_page is missing"; exit 1; }
doc_commands=$(sed -n 's/^## `batchcast \([a-z][a-z0-9-]*\)`.*/\1/p' "$commands_page" | sort -u)

for c in $cli_commands; do
  if ! grep -qx "$c" <<<"$doc_commands"; then
    fail "\`batchcast $c\` is a command (\`batchcast --help\`) but $commands_page has no heading for it: add \"## \`batchcast $c\`\" with what it does and a link to its guide page"
  fi
done
for c in $doc_commands; do
  if ! grep -qx "$c" <<<"$cli_commands"; then
    fail "$commands_page has a heading for \`batchcast $c\`, which \`batchcast --help\` does not list: remove it, or rename it to the command's current name"
  fi
done

# (b) the map of the parts.
if ! grep -qx "$map_heading" "$readme"; then
  fail "$readme has no \"$map_heading\" section (the map of the parts this check reads)"
else
  map=$(awk -v h="$map_heading" '$0 == h { on = 1; next } on && /^## / { on = 0 } on' "$readme")
  for toml in crates/*/Cargo.toml; do
    dir=${toml%/Cargo.toml}
    if ! grep -qF "\`$dir\`" <<<"$map"; then
      fail "crate $dir is not on the map of the parts: add it, as \`$dir\`, to the \"$map_heading\" section of $readme with what it does"
    fi
  done
fi

if [ "$failed" -ne 0 ]; then
  echo "check-docs: FAILED (see above)" >&2
  exit 1
fi
echo "check-docs: ok ($(printf '%s\n' "$cli_commands" | wc -l) commands, $(ls crates/*/Cargo.toml | wc -l) crates)"
