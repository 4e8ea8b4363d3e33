# Sourced by the build scripts: sets each pin of versions.env that the environment does not set.
while IFS='=' read -r _pin _value; do
  [[ "$_pin" =~ ^[A-Z0-9_]+$ ]] || continue
  [[ -n "${!_pin:-}" ]] || printf -v "$_pin" '%s' "$_value"
done < "$(dirname "${BASH_SOURCE[0]}")/versions.env"
unset _pin _value
