"""The built-in demo agent: reads the prompt on stdin and echoes it back a word at a time.

It is what ``foldline serve`` runs when ``FOLDLINE_RUNNER`` is unset, so that a fresh server
shows a whole job lifecycle (accepted, live deltas, result) without any agent installed.
``FOLDLINE_DEMO_DELAY_S`` sets the pause between words (default 0.2 s). It is a POSIX shell
program, not Python: a run executes as another user (``adapters.services.sandbox``), who may not be
allowed to reach the server's own Python and its packages.
"""

SCRIPT = (
    'prompt=$(cat); set -f; set -- $prompt; [ $# -gt 0 ] || set -- "(empty" "prompt)"; '
    'printf "echo:"; n=0; for word in "$@"; do n=$((n + 1)); [ "$n" -le 200 ] || break; '
    'printf " %s" "$word"; sleep "${FOLDLINE_DEMO_DELAY_S:-0.2}"; done; printf "\\n"'
)
