#!/usr/bin/env bash
# The run step of laya's composite action (../action.yml), also usable on its own in any CI.
#
# Inputs arrive as environment variables (never pasted into the script: no injection):
#   LAYA_MODEL (required), LAYA_COMPARE, LAYA_FAIL_UNDER, LAYA_MAX_DROP, LAYA_BASELINE, LAYA_SAMPLES,
#   LAYA_GATE_ON ('estimate' or 'bound'), LAYA_INCONCLUSIVE_EXIT (the exit code of an inconclusive bound gate),
#   LAYA_ARGS (split on whitespace), LAYA_JSON, LAYA_JUNIT, LAYA_INSTALL ('action', a pip requirement, or '').
# Writes json, junit, verdict (pass|fail|inconclusive|error: the audit JSON's own verdict) and exit-code to
# $GITHUB_OUTPUT when it is set, and exits with laya audit's own code (0 pass, 1 a gate failed, the
# inconclusive exit code, 2 bad input). laya itself appends the Markdown table to $GITHUB_STEP_SUMMARY.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
json="${LAYA_JSON:-laya-audit.json}"
junit="${LAYA_JUNIT-laya-junit.xml}"

output() {  # name value: a step output, when running under GitHub Actions
  if [ -n "${GITHUB_OUTPUT:-}" ]; then printf '%s=%s\n' "$1" "$2" >> "$GITHUB_OUTPUT"; fi
}

case "${LAYA_INSTALL:-}" in
  "") ;;
  action) python -m pip install --quiet "$here/.." || { output verdict error; output exit-code 2; exit 2; } ;;
  *) python -m pip install --quiet "$LAYA_INSTALL" || { output verdict error; output exit-code 2; exit 2; } ;;
esac

if [ -z "${LAYA_MODEL:-}" ]; then
  echo "error: the 'model' input is required (a laya checkpoint)" >&2
  output verdict error; output exit-code 2
  exit 2
fi

args=(audit "$LAYA_MODEL" --compare "${LAYA_COMPARE-ig,gradxact}" --json "$json" --overwrite)  # rerun into its own files
[ -n "$junit" ] && args+=(--junit "$junit")
[ -n "${LAYA_FAIL_UNDER:-}" ] && args+=(--fail-under "$LAYA_FAIL_UNDER")
[ -n "${LAYA_BASELINE:-}" ] && args+=(--baseline "$LAYA_BASELINE")
[ -n "${LAYA_MAX_DROP:-}" ] && args+=(--max-drop "$LAYA_MAX_DROP")
[ -n "${LAYA_SAMPLES:-}" ] && args+=(--samples "$LAYA_SAMPLES")
[ -n "${LAYA_GATE_ON:-}" ] && args+=(--gate-on "$LAYA_GATE_ON")
[ -n "${LAYA_INCONCLUSIVE_EXIT:-}" ] && args+=(--inconclusive-exit "$LAYA_INCONCLUSIVE_EXIT")
if [ -n "${LAYA_ARGS:-}" ]; then
  read -r -a extra <<< "$LAYA_ARGS"
  args+=("${extra[@]}")
fi

laya "${args[@]}"
rc=$?
# The verdict the JSON records (an inconclusive gate may exit 0 or 1, as --inconclusive-exit says); without
# a JSON (bad input, exit 2, writes nothing), the exit code's.
verdict=""
if [ "$rc" != 2 ] && [ -f "$json" ]; then
  verdict="$(grep -o '"verdict": *"[a-z]*"' "$json" | tail -n 1 | sed 's/.*"\([a-z]*\)"$/\1/')"
fi
if [ -z "$verdict" ]; then
  case $rc in
    0) verdict=pass ;;
    1) verdict=fail ;;
    *) verdict=error ;;
  esac
fi
output json "$json"
output junit "$( [ -f "$junit" ] && printf '%s' "$junit" )"
output verdict "$verdict"
output exit-code "$rc"
exit $rc
