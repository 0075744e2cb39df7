#!/usr/bin/env bash
# The half of `HOOKBOX_VM_MODE=deb systemd/vm-test.sh` that runs INSIDE the
# freshly booted Debian guest, as root, from a oneshot unit. Do not run it
# on your own machine: it installs, upgrades and purges hookbox.
#
# It runs README.md's "From the Debian package" block (vm-test.sh extracted
# it into readme-deb-steps.sh) from install/, where the first package is:
# first its `apt install` line alone, to see what the package did before
# the admin's next steps, then the rest. Then it upgrades to the package in
# upgrade/ (the same binary, the next Debian revision) and purges. Output:
# one `VMTEST PASS|FAIL <name>: <detail>` line per check, as in
# vm-test-guest.sh, whose helpers these mirror.
set -euo pipefail

cd "$(dirname "$0")"
failures=0
pass() { echo "VMTEST PASS $1${2:+: $2}"; }
fail() { echo "VMTEST FAIL $1${2:+: $2}"; failures=$((failures + 1)); }
info() { echo "VMTEST INFO $*"; }
expect() { # NAME WANTED GOT
    if [[ $3 == "$2" ]]; then pass "$1" "$3"; else fail "$1" "wanted '$2', got '$3'"; fi
}
check() { # NAME DETAIL COMMAND...: PASS when COMMAND succeeds
    if "${@:3}" >/dev/null 2>&1; then pass "$1" "$2"; else fail "$1" "$2"; fi
}
prop() { systemctl show hookbox -P "$1"; }
status_is() { # NAME WANTED_STATUS "STATUS BODY"
    if [[ ${3%% *} == "$2" ]]; then pass "$1" "$3"; else fail "$1" "wanted $2, got: $3"; fi
}
# post_github DELIVERY_ID SECRET -> "HTTP-status body"
post_github() {
    local body='{"zen":"Keep it logically awesome.","repository":{"full_name":"vm/test"}}'
    local sig
    sig=$(printf '%s' "$body" | openssl dgst -sha256 -hmac "$2" -r | cut -d' ' -f1)
    rm -f /tmp/resp
    curl -sS --max-time 60 -o /tmp/resp -w '%{http_code}' http://127.0.0.1:8080/hooks/github \
        -H 'content-type: application/json' -H 'x-github-event: ping' \
        -H "x-github-delivery: $1" -H "x-hub-signature-256: sha256=$sig" \
        --data-binary "$body" || true
    echo " $(cat /tmp/resp 2>/dev/null)"
}
# events_has NAME DELIVERY...: `hookbox events` (as root, as README.md gives
# it) lists every one of them.
events_has() {
    local out id missing=""
    out=$(STATE_DIRECTORY=/var/lib/hookbox hookbox events 2>&1 || true)
    for id in "${@:2}"; do grep -q -- "$id" <<<"$out" || missing+=" $id"; done
    if [[ -z $missing ]]; then pass "$1" "listed:${*:2}"; else fail "$1" "missing$missing in: $(tr '\n' ' ' <<<"$out" | cut -c1-300)"; fi
}
run_steps() { # NAME FILE: run README lines from install/, -x showing each
    if (cd install && bash -euxo pipefail "../$2") 2>&1 | sed 's/^/  | /'; then
        pass "$1" "every command exited 0"
    else
        fail "$1" "a command failed (see the lines above)"
    fi
}

info "guest: $(uname -r), $(systemctl --version | head -n1), packages: $(ls install upgrade | tr '\n' ' ')"

# --- 1. apt install, alone ---------------------------------------------------
grep -x 'sudo apt install \./hookbox_\*\.deb' readme-deb-steps.sh >readme-deb-install.sh
grep -vx 'sudo apt install \./hookbox_\*\.deb' readme-deb-steps.sh >readme-deb-rest.sh
# The guest is offline: apt finds the package's dependencies installed.
run_steps deb-apt-install readme-deb-install.sh
expect deb-installed-version "install ok installed $(cd install && dpkg-deb -f hookbox_*.deb Version)" \
    "$(dpkg-query -W -f '${Status} ${Version}' hookbox 2>&1 || true)"
expect deb-not-enabled disabled "$(systemctl is-enabled hookbox 2>&1 || true)"
expect deb-not-started inactive "$(systemctl is-active hookbox 2>&1 || true)"
expect deb-socket-not-enabled disabled "$(systemctl is-enabled hookbox.socket 2>&1 || true)"
for f in /usr/bin/hookbox /usr/lib/systemd/system/hookbox.service /usr/lib/systemd/system/hookbox.socket \
    /usr/share/man/man1/hookbox.1.gz /usr/share/man/man1/hookbox-serve.1.gz \
    /usr/share/bash-completion/completions/hookbox /usr/share/zsh/vendor-completions/_hookbox \
    /usr/share/fish/vendor_completions.d/hookbox.fish /usr/share/doc/hookbox/copyright \
    /usr/share/doc/hookbox/README.md /usr/share/doc/hookbox/configuration-reference.md \
    /usr/share/doc/hookbox/examples/config.example.toml; do
    check "deb-file-$(basename "$f")" "$f" test -f "$f"
done
expect deb-conffile /etc/hookbox/hookbox.toml "$(dpkg-query -W -f '${Conffiles}' hookbox | awk '{print $1}' | tr -d '\n')"
creds=$(stat -c '%a %U' /etc/hookbox/credentials; stat -c '%n %a %U %s' /etc/hookbox/credentials/* | tr '\n' ',')
expect deb-credentials-created "700 root/etc/hookbox/credentials/github-webhook-secret 600 root 0,/etc/hookbox/credentials/stripe-webhook-secret 600 root 0," \
    "$(tr -d '\n' <<<"$creds")"
size=$(stat -c %s /usr/bin/hookbox)
if ((size <= 25 * 1024 * 1024)); then
    pass deb-binary-size "/usr/bin/hookbox is $size bytes ($((size / 1024 / 1024)) MiB), $(file -b /usr/bin/hookbox 2>/dev/null | grep -o 'stripped\|not stripped' || echo '?')"
else
    fail deb-binary-size "/usr/bin/hookbox is $size bytes, more than 25 MiB"
fi

# --- 2. The rest of the README block: one secret, check, enable --now ---------
run_steps deb-readme-steps readme-deb-rest.sh
if [[ $(systemctl is-active hookbox || true) != active ]]; then
    info "--- hookbox is not active; its journal: ---"
    journalctl -u hookbox -b --no-pager | tail -n 30 | sed 's/^/  | /'
fi
expect deb-service-active active "$(systemctl is-active hookbox || true)"
expect deb-service-enabled enabled "$(systemctl is-enabled hookbox || true)"
expect deb-service-binary /usr/bin/hookbox "$(readlink "/proc/$(prop MainPID)/exe" || true)"
sec=$(systemd-analyze security hookbox --no-pager 2>&1 | grep -a 'Overall exposure' || true)
if [[ $sec =~ exposure\ level\ for\ hookbox\.service:\ ([0-9.]+)\ (PERFECT|SAFE|OK) ]]; then
    pass deb-security-score "${BASH_REMATCH[1]} ${BASH_REMATCH[2]}"
else
    fail deb-security-score "${sec:-no score}"
fi

gh_secret=$(cat /etc/hookbox/credentials/github-webhook-secret)
status_is deb-github-signed-202 202 "$(post_github vm-deb-gh-1 "$gh_secret")"
status_is deb-github-bad-signature-401 401 "$(post_github vm-deb-gh-2 "not-the-secret")"
events_has deb-events-listed vm-deb-gh-1

# --- 3. man and tab completion -------------------------------------------------
man_text=$(MANPAGER=cat MANWIDTH=100 man hookbox 2>&1 || true)
if grep -q 'hookbox-serve(1)' <<<"$man_text" && grep -q '/etc/hookbox/hookbox.toml' <<<"$man_text"; then
    pass deb-man-hookbox "man hookbox: $(grep -m1 -A1 '^NAME' <<<"$man_text" | tail -n1 | sed 's/^ *//')"
else
    fail deb-man-hookbox "$(head -c 300 <<<"$man_text")"
fi
check deb-man-hookbox-replay "man hookbox-replay documents --dead" \
    bash -c 'MANPAGER=cat man hookbox-replay | grep -q -- --dead'
# What bash does on `hookbox re<TAB>`, with bash-completion's lazy loader.
completed=$(bash -c 'source /usr/share/bash-completion/bash_completion
    _completion_loader hookbox
    COMP_WORDS=(hookbox re); COMP_CWORD=1; COMP_LINE="hookbox re"; COMP_POINT=${#COMP_LINE}
    fn=$(complete -p hookbox | sed -E "s/.*-F ([^ ]+).*/\1/")
    "$fn" hookbox re hookbox; echo "${COMPREPLY[*]}"' 2>&1 || true)
expect deb-bash-completion "replay" "$completed"

# --- 4. Upgrade to the rebuilt package, the admin's edit in the conffile -----
echo '# edited by the admin (vm-test)' >>/etc/hookbox/hookbox.toml
pid_before=$(prop MainPID)
if (cd upgrade && apt-get install -y ./hookbox_*.deb) 2>&1 | sed 's/^/  | /'; then
    pass deb-upgrade "apt-get install -y ./$(ls upgrade) exited 0"
else
    fail deb-upgrade "apt-get install of the upgrade failed (see above)"
fi
expect deb-upgraded-version "$(cd upgrade && dpkg-deb -f hookbox_*.deb Version)" \
    "$(dpkg-query -W -f '${Version}' hookbox 2>&1 || true)"
check deb-upgrade-keeps-conffile-edit "the admin's line is still in /etc/hookbox/hookbox.toml" \
    grep -qx '# edited by the admin (vm-test)' /etc/hookbox/hookbox.toml
check deb-upgrade-keeps-secret "github-webhook-secret unchanged" \
    test "$(cat /etc/hookbox/credentials/github-webhook-secret)" = "$gh_secret"
pid_after=$(prop MainPID)
if [[ $(systemctl is-active hookbox || true) == active && $pid_after != "$pid_before" && $pid_after != 0 ]]; then
    pass deb-upgrade-restarted "active, pid $pid_before -> $pid_after"
else
    fail deb-upgrade-restarted "$(systemctl is-active hookbox || true), pid $pid_before -> $pid_after"
fi
expect deb-upgrade-still-enabled enabled "$(systemctl is-enabled hookbox || true)"
events_has deb-upgrade-keeps-event vm-deb-gh-1
status_is deb-upgrade-resend-is-duplicate 200 "$(post_github vm-deb-gh-1 "$gh_secret")"
status_is deb-upgrade-new-delivery-202 202 "$(post_github vm-deb-gh-3 "$gh_secret")"

# --- 5. Purge: stops the service, leaves the data and says so ----------------
purge_out=$(apt-get purge -y hookbox 2>&1 || true)
sed 's/^/  | /' <<<"$purge_out"
expect deb-purged "not-installed" "$(dpkg-query -W -f '${db:Status-Status}' hookbox 2>/dev/null || echo not-installed)"
expect deb-purge-stopped inactive "$(systemctl is-active hookbox 2>&1 || true)"
check deb-purge-removes-conffile "/etc/hookbox/hookbox.toml gone" test ! -e /etc/hookbox/hookbox.toml
check deb-purge-keeps-database "/var/lib/private/hookbox/hookbox.db kept" test -s /var/lib/private/hookbox/hookbox.db
check deb-purge-says-database "purge names what it kept in /var/lib" \
    grep -q 'hookbox: kept /var/lib/private/hookbox' <<<"$purge_out"
check deb-purge-keeps-secret "the filled-in secret is kept, the empty one removed" \
    bash -c 'test -s /etc/hookbox/credentials/github-webhook-secret && test ! -e /etc/hookbox/credentials/stripe-webhook-secret'

if ((failures)); then
    info "--- journalctl -u hookbox ---"
    journalctl -u hookbox -b --no-pager | tail -n 60 | sed 's/^/  | /'
fi
echo "VMTEST DONE failures=$failures"
