# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_hookbox_global_optspecs
    string join \n config= log-format= h/help V/version
end

function __fish_hookbox_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_hookbox_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_hookbox_using_subcommand
    set -l cmd (__fish_hookbox_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c hookbox -n "__fish_hookbox_needs_command" -l config -d 'Config file. Without it: /etc/hookbox/hookbox.toml if present, else the embedded default' -r -F
complete -c hookbox -n "__fish_hookbox_needs_command" -l log-format -d 'Log format' -r -f -a "text\t''
json\t''"
complete -c hookbox -n "__fish_hookbox_needs_command" -s h -l help -d 'Print help'
complete -c hookbox -n "__fish_hookbox_needs_command" -s V -l version -d 'Print version'
complete -c hookbox -n "__fish_hookbox_needs_command" -f -a "serve" -d 'Receive webhooks until SIGTERM or SIGINT'
complete -c hookbox -n "__fish_hookbox_needs_command" -f -a "check" -d 'Validate the config and print it with secrets redacted'
complete -c hookbox -n "__fish_hookbox_needs_command" -f -a "healthcheck" -d 'Exit 0 when the running server is ready (GET /readyz on the admin listener): the container health check'
complete -c hookbox -n "__fish_hookbox_needs_command" -f -a "replay" -d 'Put deliveries back to pending with their attempts reset (never a new event row). Works whether or not the server is running; a running server picks them up within seconds. Three forms: `replay ID [--destination D]`; `replay --dead [--source S] [--destination D] [--since T] [--until T]`; and `replay --source S --destination D [--since T] [--until T]`, which replays the destination\'s dead and delivered deliveries and also gives it every event in the range that its filter takes and that it never had (a new destination getting old events)'
complete -c hookbox -n "__fish_hookbox_needs_command" -f -a "backup" -d 'Write a consistent, checked copy of the database to DEST (a new file, mode 0600). Safe while the server runs and writes'
complete -c hookbox -n "__fish_hookbox_needs_command" -f -a "events" -d 'List events, newest first. Reads the database read-only, so it works whether or not the server runs'
complete -c hookbox -n "__fish_hookbox_needs_command" -f -a "purge" -d 'Delete dead events for good: those whose last attempt is older than --older-than (e.g. 30d)'
complete -c hookbox -n "__fish_hookbox_needs_command" -f -a "destination" -d 'Pause or resume a destination by hand (planned maintenance): while paused it keeps receiving into its queue and nothing is attempted; on resume its backlog is due at once. Works whether or not the server is running; a running server sees it within 2 s. `list` shows every destination\'s pauses'
complete -c hookbox -n "__fish_hookbox_needs_command" -f -a "try" -d 'Run DESTINATION\'s filter and transform over events of SOURCE already stored, sending nothing, and print for each whether it matches and exactly what would be sent (secrets redacted). With --config, a destination not running yet is tried against the database that config names. Reads the database read-only'
complete -c hookbox -n "__fish_hookbox_needs_command" -f -a "listen" -d 'Take events from a pull destination of a (remote) hookbox and POST each to a local URL: ack on 2xx, nack otherwise. Nothing sent while this was not running is lost: it is taken when it runs again'
complete -c hookbox -n "__fish_hookbox_needs_command" -f -a "catch-up" -d 'Run one catch-up pass of SOURCE now (GitHub redelivery, GitLab resend, Paddle replay, Stripe or Square backfill) and print what it found and asked for. Waits for a pass the server is running to finish first. With --report, runs nothing and prints the source\'s completeness ledger instead (exit 1 when something is missing)'
complete -c hookbox -n "__fish_hookbox_needs_command" -f -a "alerts" -d 'Alerts ([[alerts]] in the config)'
complete -c hookbox -n "__fish_hookbox_needs_command" -f -a "man" -d 'Print the man page hookbox.1, generated from these definitions; or, with --out-dir, write it and one page per command (hookbox-serve.1, ...) there'
complete -c hookbox -n "__fish_hookbox_needs_command" -f -a "completions" -d 'Print the tab-completion script for SHELL, e.g. `hookbox completions bash > /etc/bash_completion.d/hookbox`'
complete -c hookbox -n "__fish_hookbox_using_subcommand serve" -l config -d 'Config file. Without it: /etc/hookbox/hookbox.toml if present, else the embedded default' -r -F
complete -c hookbox -n "__fish_hookbox_using_subcommand serve" -l log-format -d 'Log format' -r -f -a "text\t''
json\t''"
complete -c hookbox -n "__fish_hookbox_using_subcommand serve" -s h -l help -d 'Print help'
complete -c hookbox -n "__fish_hookbox_using_subcommand check" -l config -d 'Config file. Without it: /etc/hookbox/hookbox.toml if present, else the embedded default' -r -F
complete -c hookbox -n "__fish_hookbox_using_subcommand check" -l log-format -d 'Log format' -r -f -a "text\t''
json\t''"
complete -c hookbox -n "__fish_hookbox_using_subcommand check" -s h -l help -d 'Print help'
complete -c hookbox -n "__fish_hookbox_using_subcommand healthcheck" -l config -d 'Config file. Without it: /etc/hookbox/hookbox.toml if present, else the embedded default' -r -F
complete -c hookbox -n "__fish_hookbox_using_subcommand healthcheck" -l log-format -d 'Log format' -r -f -a "text\t''
json\t''"
complete -c hookbox -n "__fish_hookbox_using_subcommand healthcheck" -s h -l help -d 'Print help'
complete -c hookbox -n "__fish_hookbox_using_subcommand replay" -l source -d 'Only events of this source' -r
complete -c hookbox -n "__fish_hookbox_using_subcommand replay" -l destination -d 'Only deliveries at this destination. With an ID, its delivery there, created if the event never had one' -r
complete -c hookbox -n "__fish_hookbox_using_subcommand replay" -l since -d 'Only events received at or after this time: RFC 3339, a date (2026-11-01, UTC) or unix milliseconds' -r
complete -c hookbox -n "__fish_hookbox_using_subcommand replay" -l until -d 'Only events received before this time (as --since)' -r
complete -c hookbox -n "__fish_hookbox_using_subcommand replay" -l config -d 'Config file. Without it: /etc/hookbox/hookbox.toml if present, else the embedded default' -r -F
complete -c hookbox -n "__fish_hookbox_using_subcommand replay" -l log-format -d 'Log format' -r -f -a "text\t''
json\t''"
complete -c hookbox -n "__fish_hookbox_using_subcommand replay" -l dead -d 'Every dead delivery (of --source, at --destination, if given)'
complete -c hookbox -n "__fish_hookbox_using_subcommand replay" -l skipped -d 'Every skipped delivery (a transform gave no output; fix it, then replay them to run it again), of --source, at --destination'
complete -c hookbox -n "__fish_hookbox_using_subcommand replay" -s h -l help -d 'Print help'
complete -c hookbox -n "__fish_hookbox_using_subcommand backup" -l config -d 'Config file. Without it: /etc/hookbox/hookbox.toml if present, else the embedded default' -r -F
complete -c hookbox -n "__fish_hookbox_using_subcommand backup" -l log-format -d 'Log format' -r -f -a "text\t''
json\t''"
complete -c hookbox -n "__fish_hookbox_using_subcommand backup" -l force -d 'Replace DEST if it exists'
complete -c hookbox -n "__fish_hookbox_using_subcommand backup" -s h -l help -d 'Print help'
complete -c hookbox -n "__fish_hookbox_using_subcommand events" -l source -r
complete -c hookbox -n "__fish_hookbox_using_subcommand events" -l destination -d 'Only events with a delivery at this destination; STATE, ATTEMPTS and LAST ERROR are then that delivery\'s, and --state filters on it' -r
complete -c hookbox -n "__fish_hookbox_using_subcommand events" -l state -r -f -a "pending\t''
delivered\t''
dead\t''
skipped\t''
stored\t''"
complete -c hookbox -n "__fish_hookbox_using_subcommand events" -l event-type -r
complete -c hookbox -n "__fish_hookbox_using_subcommand events" -l q -d 'Only events whose body has all these words; `word*` matches a prefix (needs `[search] enabled`, the default)' -r
complete -c hookbox -n "__fish_hookbox_using_subcommand events" -l limit -d 'Most events to list' -r
complete -c hookbox -n "__fish_hookbox_using_subcommand events" -l config -d 'Config file. Without it: /etc/hookbox/hookbox.toml if present, else the embedded default' -r -F
complete -c hookbox -n "__fish_hookbox_using_subcommand events" -l log-format -d 'Log format' -r -f -a "text\t''
json\t''"
complete -c hookbox -n "__fish_hookbox_using_subcommand events" -l json -d 'One JSON object per line instead of a table'
complete -c hookbox -n "__fish_hookbox_using_subcommand events" -s h -l help -d 'Print help'
complete -c hookbox -n "__fish_hookbox_using_subcommand purge" -l older-than -d 'How long an event must have been dead, e.g. "30d", "12h"' -r
complete -c hookbox -n "__fish_hookbox_using_subcommand purge" -l source -d 'Only events of this source' -r
complete -c hookbox -n "__fish_hookbox_using_subcommand purge" -l config -d 'Config file. Without it: /etc/hookbox/hookbox.toml if present, else the embedded default' -r -F
complete -c hookbox -n "__fish_hookbox_using_subcommand purge" -l log-format -d 'Log format' -r -f -a "text\t''
json\t''"
complete -c hookbox -n "__fish_hookbox_using_subcommand purge" -l dead -d 'Purge dead events (the only kind purge removes)'
complete -c hookbox -n "__fish_hookbox_using_subcommand purge" -s h -l help -d 'Print help'
complete -c hookbox -n "__fish_hookbox_using_subcommand destination; and not __fish_seen_subcommand_from pause resume list" -l config -d 'Config file. Without it: /etc/hookbox/hookbox.toml if present, else the embedded default' -r -F
complete -c hookbox -n "__fish_hookbox_using_subcommand destination; and not __fish_seen_subcommand_from pause resume list" -l log-format -d 'Log format' -r -f -a "text\t''
json\t''"
complete -c hookbox -n "__fish_hookbox_using_subcommand destination; and not __fish_seen_subcommand_from pause resume list" -s h -l help -d 'Print help'
complete -c hookbox -n "__fish_hookbox_using_subcommand destination; and not __fish_seen_subcommand_from pause resume list" -f -a "pause" -d 'Pause SOURCE\'s destination NAME until resumed'
complete -c hookbox -n "__fish_hookbox_using_subcommand destination; and not __fish_seen_subcommand_from pause resume list" -f -a "resume" -d 'Resume SOURCE\'s destination NAME'
complete -c hookbox -n "__fish_hookbox_using_subcommand destination; and not __fish_seen_subcommand_from pause resume list" -f -a "list" -d 'Every paused destination, by hand or by its circuit breaker'
complete -c hookbox -n "__fish_hookbox_using_subcommand destination; and __fish_seen_subcommand_from pause" -l config -d 'Config file. Without it: /etc/hookbox/hookbox.toml if present, else the embedded default' -r -F
complete -c hookbox -n "__fish_hookbox_using_subcommand destination; and __fish_seen_subcommand_from pause" -l log-format -d 'Log format' -r -f -a "text\t''
json\t''"
complete -c hookbox -n "__fish_hookbox_using_subcommand destination; and __fish_seen_subcommand_from pause" -s h -l help -d 'Print help'
complete -c hookbox -n "__fish_hookbox_using_subcommand destination; and __fish_seen_subcommand_from resume" -l config -d 'Config file. Without it: /etc/hookbox/hookbox.toml if present, else the embedded default' -r -F
complete -c hookbox -n "__fish_hookbox_using_subcommand destination; and __fish_seen_subcommand_from resume" -l log-format -d 'Log format' -r -f -a "text\t''
json\t''"
complete -c hookbox -n "__fish_hookbox_using_subcommand destination; and __fish_seen_subcommand_from resume" -s h -l help -d 'Print help'
complete -c hookbox -n "__fish_hookbox_using_subcommand destination; and __fish_seen_subcommand_from list" -l config -d 'Config file. Without it: /etc/hookbox/hookbox.toml if present, else the embedded default' -r -F
complete -c hookbox -n "__fish_hookbox_using_subcommand destination; and __fish_seen_subcommand_from list" -l log-format -d 'Log format' -r -f -a "text\t''
json\t''"
complete -c hookbox -n "__fish_hookbox_using_subcommand destination; and __fish_seen_subcommand_from list" -s h -l help -d 'Print help'
complete -c hookbox -n "__fish_hookbox_using_subcommand try" -l event -d 'This event (its id, as `hookbox events` lists it)' -r
complete -c hookbox -n "__fish_hookbox_using_subcommand try" -l last -d 'The newest N events of SOURCE (the default: 10)' -r
complete -c hookbox -n "__fish_hookbox_using_subcommand try" -l since -d 'Events received since this time (RFC 3339, a date, or unix ms), at most 1000, newest first' -r
complete -c hookbox -n "__fish_hookbox_using_subcommand try" -l config -d 'Config file. Without it: /etc/hookbox/hookbox.toml if present, else the embedded default' -r -F
complete -c hookbox -n "__fish_hookbox_using_subcommand try" -l log-format -d 'Log format' -r -f -a "text\t''
json\t''"
complete -c hookbox -n "__fish_hookbox_using_subcommand try" -l json -d 'One JSON object per event instead of text'
complete -c hookbox -n "__fish_hookbox_using_subcommand try" -s h -l help -d 'Print help'
complete -c hookbox -n "__fish_hookbox_using_subcommand listen" -l url -d 'The hookbox to pull from, e.g. https://hooks.example.com' -r
complete -c hookbox -n "__fish_hookbox_using_subcommand listen" -l source -r
complete -c hookbox -n "__fish_hookbox_using_subcommand listen" -l destination -d 'The pull destination\'s name' -r
complete -c hookbox -n "__fish_hookbox_using_subcommand listen" -l token -d 'The destination\'s pull token: env:NAME, file:PATH or the token itself (visible to other users in the process list; prefer env:)' -r
complete -c hookbox -n "__fish_hookbox_using_subcommand listen" -l forward-to -d 'Where each event is POSTed, e.g. http://127.0.0.1:3000/webhooks' -r
complete -c hookbox -n "__fish_hookbox_using_subcommand listen" -l max -d 'Events per take (1-100)' -r
complete -c hookbox -n "__fish_hookbox_using_subcommand listen" -l ca -d 'A PEM CA certificate to trust besides the system\'s' -r -F
complete -c hookbox -n "__fish_hookbox_using_subcommand listen" -l config -d 'Config file. Without it: /etc/hookbox/hookbox.toml if present, else the embedded default' -r -F
complete -c hookbox -n "__fish_hookbox_using_subcommand listen" -l log-format -d 'Log format' -r -f -a "text\t''
json\t''"
complete -c hookbox -n "__fish_hookbox_using_subcommand listen" -l once -d 'Forward what is due now, then exit'
complete -c hookbox -n "__fish_hookbox_using_subcommand listen" -s h -l help -d 'Print help'
complete -c hookbox -n "__fish_hookbox_using_subcommand catch-up" -l window -d 'How far back --report sums the passes (72h, 7d)' -r
complete -c hookbox -n "__fish_hookbox_using_subcommand catch-up" -l config -d 'Config file. Without it: /etc/hookbox/hookbox.toml if present, else the embedded default' -r -F
complete -c hookbox -n "__fish_hookbox_using_subcommand catch-up" -l log-format -d 'Log format' -r -f -a "text\t''
json\t''"
complete -c hookbox -n "__fish_hookbox_using_subcommand catch-up" -l dry-run -d 'Ask for nothing and insert nothing; only show what would be done'
complete -c hookbox -n "__fish_hookbox_using_subcommand catch-up" -l report -d 'Print the completeness ledger of the passes of the last --window'
complete -c hookbox -n "__fish_hookbox_using_subcommand catch-up" -s h -l help -d 'Print help'
complete -c hookbox -n "__fish_hookbox_using_subcommand alerts; and not __fish_seen_subcommand_from test" -l config -d 'Config file. Without it: /etc/hookbox/hookbox.toml if present, else the embedded default' -r -F
complete -c hookbox -n "__fish_hookbox_using_subcommand alerts; and not __fish_seen_subcommand_from test" -l log-format -d 'Log format' -r -f -a "text\t''
json\t''"
complete -c hookbox -n "__fish_hookbox_using_subcommand alerts; and not __fish_seen_subcommand_from test" -s h -l help -d 'Print help'
complete -c hookbox -n "__fish_hookbox_using_subcommand alerts; and not __fish_seen_subcommand_from test" -f -a "test" -d 'Send one test message to each [[alerts]] receiver and say, per alert, whether it arrived; exit 1 if any did not'
complete -c hookbox -n "__fish_hookbox_using_subcommand alerts; and __fish_seen_subcommand_from test" -l config -d 'Config file. Without it: /etc/hookbox/hookbox.toml if present, else the embedded default' -r -F
complete -c hookbox -n "__fish_hookbox_using_subcommand alerts; and __fish_seen_subcommand_from test" -l log-format -d 'Log format' -r -f -a "text\t''
json\t''"
complete -c hookbox -n "__fish_hookbox_using_subcommand alerts; and __fish_seen_subcommand_from test" -s h -l help -d 'Print help'
complete -c hookbox -n "__fish_hookbox_using_subcommand man" -l out-dir -d 'Write every page into this directory instead of printing one' -r -F
complete -c hookbox -n "__fish_hookbox_using_subcommand man" -l config -d 'Config file. Without it: /etc/hookbox/hookbox.toml if present, else the embedded default' -r -F
complete -c hookbox -n "__fish_hookbox_using_subcommand man" -l log-format -d 'Log format' -r -f -a "text\t''
json\t''"
complete -c hookbox -n "__fish_hookbox_using_subcommand man" -s h -l help -d 'Print help'
complete -c hookbox -n "__fish_hookbox_using_subcommand completions" -l config -d 'Config file. Without it: /etc/hookbox/hookbox.toml if present, else the embedded default' -r -F
complete -c hookbox -n "__fish_hookbox_using_subcommand completions" -l log-format -d 'Log format' -r -f -a "text\t''
json\t''"
complete -c hookbox -n "__fish_hookbox_using_subcommand completions" -s h -l help -d 'Print help'
