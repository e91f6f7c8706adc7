"""Runner commands for tests: small shell programs standing in for an agent CLI."""

ECHO = "cat"  # the result is the prompt
SLOW = 'read -r line; echo "got: $line"; sleep 1; echo done'
FAIL = 'cat >/dev/null; echo "it broke" >&2; exit 3'
MEDIA = 'cat >/dev/null; printf "made a file\\nMEDIA:out.txt\\nMEDIA:../etc/passwd\\n"'
# The same file named as an agent might print it: dotted, and absolute.
MEDIA_SPELLED = 'cat >/dev/null; printf "MEDIA:./sub/../out.txt\\nMEDIA:%s/out.txt\\n" "$PWD"'
ENV = (
    'cat >/dev/null; echo "$FOLDLINE_JOB_ID $FOLDLINE_SESSION_ID $FOLDLINE_RUN_ID'
    ' $FOLDLINE_RESUMED"'
)
# Prints a word every 0.1 s, for SSE deltas and keep-alives.
TICKS = 'cat >/dev/null; for i in 1 2 3 4 5 6; do printf "tick$i "; sleep 0.1; done'
SLEEPY = "cat >/dev/null; sleep 30"

# What a server tells every run about itself (a live-channel run also gets FOLDLINE_INPUT), and
# what sh exports on its own: the names a run's printed environment has beyond what it was
# given from the server's own environment.
RUN_OWN = frozenset(
    {
        "FOLDLINE_JOB_ID",
        "FOLDLINE_SESSION_ID",
        "FOLDLINE_RUN_ID",
        "FOLDLINE_RESUMED",
        "FOLDLINE_URL",
        "FOLDLINE_RUN_TOKEN",
        "FOLDLINE_SESSION_HISTORY",  # a root job's run (ADR 0049)
        "TRACEPARENT",  # the run's place in its job's trace (ADR 0059)
    }
)
SHELL_OWN = frozenset({"PWD", "OLDPWD", "SHLVL", "_"})
