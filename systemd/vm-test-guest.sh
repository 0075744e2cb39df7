#!/usr/bin/env bash
# The half of systemd/vm-test.sh that runs INSIDE the freshly booted Debian
# guest, as root, from a oneshot unit, once multi-user.target is reached.
# Do not run it on your own machine: it installs hookbox system-wide.
#
# It first runs the README's "Step by step, on Debian" block (extracted by
# vm-test.sh into readme-steps.sh, so the README itself is what is tested,
# not a copy of it), then checks what the README and SECURITY.md promise
# about the running service. Every check prints one line
#   VMTEST PASS|FAIL <name>: <detail>
# to stdout, which the unit sends to the guest's second serial port; the
# host greps those lines. A failing check never stops the others, so one
# run shows everything that is wrong.
set -euo pipefail

cd "$(dirname "$0")"
failures=0
pass() { echo "VMTEST PASS $1${2:+: $2}"; }
fail() { echo "VMTEST FAIL $1${2:+: $2}"; failures=$((failures + 1)); }
info() { echo "VMTEST INFO $*"; }
# expect NAME WANTED GOT: PASS when GOT equals WANTED.
expect() {
    if [[ $3 == "$2" ]]; then pass "$1" "$3"; else fail "$1" "wanted '$2', got '$3'"; fi
}
prop() { systemctl show hookbox -P "$1"; }

STATE=/var/lib/hookbox   # where the README says the state lives
PUBLIC=http://127.0.0.1:8080
ADMIN=http://127.0.0.1:8081

info "guest: $(uname -r), $(systemctl --version | head -n1), PID 1 is $(cat /proc/1/comm)"

# --- 1. The README's install steps, verbatim ---------------------------------
# Run from a directory laid out like the project root (target/release/hookbox,
# systemd/hookbox.service), as the README's commands expect. -x shows each
# command in the results; the steps' own output follows it.
if (cd project && bash -euxo pipefail ../readme-steps.sh) 2>&1 | sed 's/^/  | /'; then
    pass readme-install-steps "every command of the README's systemd block exited 0"
else
    fail readme-install-steps "a command of the README's systemd block failed (see the lines above)"
fi

if [[ $(systemctl is-active hookbox || true) != active ]]; then
    info "--- hookbox is not active; its journal: ---"
    journalctl -u hookbox -b --no-pager | tail -n 30 | sed 's/^/  | /'
fi

# --- 2. Ready: Type=notify means "active" only after READY=1 -----------------
expect service-active active "$(systemctl is-active hookbox || true)"
expect service-type-notify notify "$(prop Type)"
expect service-enabled enabled "$(systemctl is-enabled hookbox || true)"

# --- 3. Signed webhooks ------------------------------------------------------
# The secrets are whatever the README's steps wrote into the credentials.
gh_secret=$(cat /etc/hookbox/credentials/github-webhook-secret || true)
stripe_secret=$(cat /etc/hookbox/credentials/stripe-webhook-secret || true)
hmac_hex() { openssl dgst -sha256 -hmac "$1" -r | cut -d' ' -f1; }

# post_github DELIVERY_ID SECRET -> prints "HTTP-status body"
post_github() {
    local body='{"zen":"Keep it logically awesome.","repository":{"full_name":"vm/test"}}'
    local sig
    sig=$(printf '%s' "$body" | hmac_hex "$2")
    rm -f /tmp/resp
    curl -sS --max-time 60 -o /tmp/resp -w '%{http_code}' "$PUBLIC/hooks/github" \
        -H 'content-type: application/json' -H 'x-github-event: ping' \
        -H "x-github-delivery: $1" -H "x-hub-signature-256: sha256=$sig" \
        --data-binary "$body" || true
    echo " $(cat /tmp/resp 2>/dev/null)"
}
# post_stripe EVENT_ID SECRET -> prints "HTTP-status body"; signed as Stripe
# does: v1 = HMAC-SHA256(secret, "t.body"), t = now.
post_stripe() {
    local body t sig
    body=$(printf '{"id":"%s","object":"event","type":"payment_intent.succeeded","data":{"object":{}}}' "$1")
    t=$(date +%s)
    sig=$(printf '%s.%s' "$t" "$body" | hmac_hex "$2")
    curl -sS -o /tmp/resp -w '%{http_code}' "$PUBLIC/hooks/stripe" \
        -H 'content-type: application/json' -H "stripe-signature: t=$t,v1=$sig" \
        --data-binary "$body" || true
    echo " $(cat /tmp/resp 2>/dev/null)"
}
status_is() { # NAME WANTED_STATUS "STATUS BODY"
    if [[ ${3%% *} == "$2" ]]; then pass "$1" "$3"; else fail "$1" "wanted $2, got: $3"; fi
}

status_is github-signed-202 202 "$(post_github vm-test-gh-1 "$gh_secret")"
status_is github-resend-200 200 "$(post_github vm-test-gh-1 "$gh_secret")"
status_is github-bad-signature-401 401 "$(post_github vm-test-gh-2 "not-the-secret")"
status_is stripe-signed-202 202 "$(post_stripe evt_vmtest_1 "$stripe_secret")"
status_is stripe-resend-200 200 "$(post_stripe evt_vmtest_1 "$stripe_secret")"
status_is stripe-bad-signature-401 401 "$(post_stripe evt_vmtest_2 "whsec_wrong")"

# --- 4. Listing: admin API (README "The admin listener and its token") --------
# and the CLI as the README's systemd section documents it.
events_listed() { # NAME COMMAND...: both deliveries appear in the output
    local out
    if out=$("${@:2}" 2>&1) && grep -q vm-test-gh-1 <<<"$out" && grep -q evt_vmtest_1 <<<"$out"; then
        pass "$1" "both events listed"
    else
        fail "$1" "$(tr '\n' ' ' <<<"$out" | cut -c1-400)"
    fi
}
api_events() {
    local token
    token=$(cat "$STATE/admin-token")
    curl -sS -f -H "Authorization: Bearer $token" "$ADMIN/api/events"
}
events_listed admin-api-lists-events api_events
# As README.md gives it: commands that only read the database resolve no
# secrets, so no $CREDENTIALS_DIRECTORY; the path comes from STATE_DIRECTORY.
events_listed cli-hookbox-events sudo STATE_DIRECTORY=/var/lib/hookbox hookbox events

# --- 5. State directory: owner and modes (README, SECURITY.md) ---------------
main_uid() { stat -c %u "/proc/$(prop MainPID)" 2>/dev/null || echo none; }
svc_uid=$(main_uid)
info "service runs as uid $svc_uid ($(getent passwd "$svc_uid" | cut -d: -f1 || true))"
if [[ $svc_uid =~ ^[0-9]+$ ]] && ((svc_uid >= 61184 && svc_uid <= 65519)); then
    pass dynamic-user "uid $svc_uid is in systemd's DynamicUser range"
else
    fail dynamic-user "uid $svc_uid is not a DynamicUser uid"
fi
# check_modes WHEN: every file in the state dir is 0600 and the dir 0700,
# all owned by the service's uid (files a root CLI run created included).
check_modes() {
    local bad="" f dir
    dir=$(readlink -f "$STATE")
    [[ $(stat -c '%a %u' "$dir") == "700 $svc_uid" ]] || bad+=" $dir=$(stat -c '%a:%u' "$dir")"
    for f in "$dir"/*; do
        [[ $(stat -c '%a %u' "$f") == "600 $svc_uid" ]] || bad+=" $f=$(stat -c '%a:%u' "$f")"
    done
    local listing
    listing=$(cd "$dir" && stat -c '%n %a %U' -- * | tr '\n' ',' || true)
    if [[ -z $bad ]]; then pass "state-dir-modes-$1" "$dir 700, $listing"; else fail "state-dir-modes-$1" "$bad"; fi
}
for f in hookbox.db hookbox.db-wal admin-token; do
    if [[ -e $STATE/$f ]]; then pass "state-file-$f" "exists"; else fail "state-file-$f" "missing"; fi
done
check_modes running

# --- 6. Watchdog -------------------------------------------------------------
wd=$(prop WatchdogUSec)
expect watchdog-armed 30s "$wd"
pid_before=$(prop MainPID)
restarts_before=$(prop NRestarts)
info "waiting 45 s, longer than WatchdogSec=$wd"
sleep 45
if [[ $(systemctl is-active hookbox || true) == active && $(prop MainPID) == "$pid_before" &&
    $(prop NRestarts) == "$restarts_before" ]] &&
    ! journalctl -u hookbox -b --no-pager | grep -qi 'watchdog timeout'; then
    pass watchdog-survives "still active after 45 s, same PID $pid_before, no watchdog timeout"
else
    fail watchdog-survives "state=$(systemctl is-active hookbox || true) pid=$(prop MainPID) (was $pid_before) restarts=$(prop NRestarts)"
fi

# --- 7. systemd-analyze security, on the real system -------------------------
sec=$(systemd-analyze security hookbox --no-pager 2>&1 | grep -a 'Overall exposure' || true)
info "systemd-analyze security: ${sec:-<no overall line>}"
if [[ $sec =~ exposure\ level\ for\ hookbox\.service:\ ([0-9.]+)\ (PERFECT|SAFE|OK) ]]; then
    pass security-score "${BASH_REMATCH[1]} ${BASH_REMATCH[2]}"
    echo "VMTEST SCORE ${BASH_REMATCH[1]} ${BASH_REMATCH[2]}"
else
    fail security-score "${sec:-systemd-analyze security printed no score}"
fi

# --- 8. Restart keeps the data -----------------------------------------------
systemctl restart hookbox || true
expect restart-active active "$(systemctl is-active hookbox || true)"
events_listed restart-keeps-events api_events
status_is restart-resend-is-duplicate 200 "$(post_github vm-test-gh-1 "$gh_secret")"
svc_uid=$(main_uid) # same DynamicUser uid, normally

# --- 9. Clean stop -------------------------------------------------------------
since=$(date '+%Y-%m-%d %H:%M:%S')
sleep 1
t0=$(date +%s)
systemctl stop hookbox || true
info "stop took $(($(date +%s) - t0)) s"
expect stop-result success "$(prop Result)"
expect stop-exit-status 0 "$(prop ExecMainStatus)"
stop_log=$(journalctl -u hookbox --since "$since" --no-pager -o cat)
if grep -Eqi 'SIGKILL|killing|timed out|watchdog' <<<"$stop_log"; then
    fail stop-no-sigkill "$(tr '\n' ' ' <<<"$stop_log" | cut -c1-400)"
else
    pass stop-no-sigkill "journal: $(tr '\n' ' ' <<<"$stop_log" | cut -c1-300)"
fi
# A clean stop checkpoints the WAL (README "Upgrading" relies on it).
wal_size=$(stat -c %s "$STATE/hookbox.db-wal" 2>/dev/null || echo 0)
expect stop-wal-checkpointed 0 "$wal_size"

# --- 10. A root CLI run while stopped must not lock the service out -----------
# (root opening the database could leave root-owned -wal/-shm files behind.)
events_listed cli-events-while-stopped sudo STATE_DIRECTORY=/var/lib/hookbox hookbox events
check_modes after-root-cli
systemctl start hookbox || true
expect start-after-root-cli active "$(systemctl is-active hookbox || true)"
status_is post-after-restart-202 202 "$(post_github vm-test-gh-3 "$gh_secret")"

# --- 11. Socket activation (README "Socket activation", ACME step 3) ---------
# The README's block, as written (vm-test.sh extracted it into
# readme-socket.sh): hookbox.socket binds 443 and hands it over, while the
# unit stays as shipped (PrivateUsers=yes, no capabilities). The guest's
# config has no TLS, so plain HTTP on 443 is what hookbox serves there.
PUBLIC=http://127.0.0.1:443
# listeners_on PORT: "pid/comm ..." of every process holding a listening TCP
# socket on PORT (from /proc, as the guest has no ss), or "none".
listeners_on() {
    local hex inodes ino fd out=""
    hex=$(printf '%04X' "$1")
    inodes=$(awk -v p=":$hex" '$4 == "0A" && substr($2, length($2) - 4) == p { print $10 }' \
        /proc/net/tcp /proc/net/tcp6 | sort -u)
    for ino in $inodes; do
        for fd in /proc/[0-9]*/fd/*; do
            if [[ $(readlink "$fd" 2>/dev/null) == "socket:[$ino]" ]]; then
                fd=${fd#/proc/}
                out+=" ${fd%%/*}/$(cat "/proc/${fd%%/*}/comm" 2>/dev/null || true)"
            fi
        done
    done
    out=$(tr ' ' '\n' <<<"$out" | grep . | sort -u | tr '\n' ' ' || true)
    out=${out% }
    echo "${out:-none}"
}
# Why the README's block stops hookbox first: systemd will not start a
# socket unit while the service it triggers is running.
expect socket-probe-service-running active "$(systemctl is-active hookbox || true)"
install -m 0644 project/systemd/hookbox.socket /etc/systemd/system/hookbox.socket
systemctl daemon-reload
since=$(date '+%Y-%m-%d %H:%M:%S')
sleep 1
probe=$(systemctl start hookbox.socket 2>&1) && probe_rc=0 || probe_rc=$?
sleep 1
probe_log=$(journalctl -u hookbox.socket --since "$since" --no-pager -o cat | tr '\n' ' ')
if ((probe_rc != 0)) && [[ $probe_log == *"already active, refusing"* ]]; then
    pass socket-refused-while-service-runs "systemctl start hookbox.socket: exit $probe_rc; journal: $probe_log"
else
    fail socket-refused-while-service-runs "systemctl start hookbox.socket: exit $probe_rc, '$probe'; journal: $probe_log"
fi
systemctl stop hookbox.socket 2>/dev/null || true
systemctl reset-failed hookbox.socket 2>/dev/null || true
rm -f /etc/systemd/system/hookbox.socket
systemctl daemon-reload

since=$(date '+%Y-%m-%d %H:%M:%S')
sleep 1
if (cd project && bash -euxo pipefail ../readme-socket.sh) 2>&1 | sed 's/^/  | /'; then
    pass socket-readme-steps "every command of the README's socket activation block exited 0"
else
    fail socket-readme-steps "a command of the README's socket activation block failed (see above)"
fi
# SubState: "running" while the service it started runs, else "listening".
sock_state="$(systemctl is-active hookbox.socket || true) $(systemctl show hookbox.socket -P SubState)"
if [[ $sock_state == "active running" || $sock_state == "active listening" ]]; then
    pass socket-active "$sock_state, $(systemctl is-enabled hookbox.socket || true)"
else
    fail socket-active "wanted 'active running' or 'active listening', got '$sock_state'"
fi
if [[ $(systemctl is-active hookbox.socket || true) != active ]]; then
    info "--- hookbox.socket is not active; its journal: ---"
    journalctl -u hookbox.socket -b --no-pager | tail -n 20 | sed 's/^/  | /'
fi
sock_listen=$(systemctl show hookbox.socket -P Listen)
holders=$(listeners_on 443)
if [[ $sock_listen == *:443\ \(Stream\)* && " $holders " == *" 1/systemd "* ]]; then
    pass socket-listens-443 "Listen=$sock_listen, port 443 held by: $holders"
else
    fail socket-listens-443 "Listen=$sock_listen, port 443 held by: $holders"
fi
expect socket-service-active active "$(systemctl is-active hookbox || true)"
sock_log=$(journalctl -u hookbox --since "$since" --no-pager -o cat)
if grep -qF 'serving on the socket systemd passed (socket activation)' <<<"$sock_log"; then
    pass socket-journal "$(grep -F 'socket activation' <<<"$sock_log" | head -n1 | cut -c1-200)"
else
    fail socket-journal "no 'serving on the socket systemd passed' since $since: $(tr '\n' ' ' <<<"$sock_log" | cut -c1-400)"
fi
status_is socket-post-443-202 202 "$(post_github vm-test-gh-sock-1 "$gh_secret")"
# The passed socket replaces server.listen: nothing binds 8080 any more.
expect socket-replaces-listen none "$(listeners_on 8080)"
# Still as hardened as shipped.
svc_pid=$(prop MainPID)
caps=$(grep -E '^Cap(Eff|Bnd|Amb):' "/proc/$svc_pid/status" 2>/dev/null | tr -s '\t\n' '  ' || true)
uid_map=$(tr -s ' \n' ' ' <"/proc/$svc_pid/uid_map" 2>/dev/null || true)
if [[ $(prop PrivateUsers) == yes && -z $(prop CapabilityBoundingSet) &&
    -z $(prop AmbientCapabilities) && $caps == *CapEff:\ 0000000000000000* ]]; then
    pass socket-unit-as-shipped "PrivateUsers=yes, CapabilityBoundingSet= AmbientCapabilities= empty; pid $svc_pid: ${caps}uid_map: $uid_map"
else
    fail socket-unit-as-shipped "PrivateUsers=$(prop PrivateUsers) CapabilityBoundingSet='$(prop CapabilityBoundingSet)' AmbientCapabilities='$(prop AmbientCapabilities)' $caps"
fi

# A delivery sent while `systemctl restart hookbox` is under way: the old
# process has stopped accepting (or is gone), the new one is not up yet, and
# the connection waits in the socket's queue instead of being refused.
pid_before=$(prop MainPID)
systemctl --no-block restart hookbox || true
for _ in $(seq 100); do
    [[ $(systemctl is-active hookbox || true) != active ]] && break
    sleep 0.1
done
window="sent while hookbox was '$(systemctl is-active hookbox || true)' (pid $pid_before restarting)"
got=$(post_github vm-test-gh-sock-2 "$gh_secret")
if [[ ${got%% *} == 202 ]]; then
    pass socket-post-during-restart "$window: $got"
else
    fail socket-post-during-restart "$window: wanted 202, got: $got"
fi
for _ in $(seq 300); do
    [[ $(systemctl is-active hookbox || true) == active ]] && break
    sleep 0.1
done
info "after the restart: hookbox $(systemctl is-active hookbox || true), pid $(prop MainPID) (was $pid_before)"

# Stopped service, active socket: systemd keeps 443 bound, and a connection
# starts hookbox again.
systemctl stop hookbox.service 2>&1 | sed 's/^/  | /' || true
holders=$(listeners_on 443)
if [[ $(systemctl is-active hookbox || true) != active && $holders == 1/systemd ]]; then
    pass socket-holds-443-while-stopped "hookbox $(systemctl is-active hookbox || true), port 443 held by: $holders"
else
    fail socket-holds-443-while-stopped "hookbox $(systemctl is-active hookbox || true), port 443 held by: $holders"
fi
status_is socket-post-starts-service-202 202 "$(post_github vm-test-gh-sock-3 "$gh_secret")"
expect socket-started-by-connection active "$(systemctl is-active hookbox || true)"

# --- 12. Port 443 without the socket: CAP_NET_BIND_SERVICE (ACME step 3) -----
# The README's drop-in (readme-port443.ini, extracted from ACME step 3)
# first without its PrivateUsers=no line, then as written.
systemctl disable --now hookbox.socket 2>&1 | sed 's/^/  | /' || true
cp /etc/hookbox/hookbox.toml /root/hookbox.toml.orig
sed -i 's/^listen = .*/listen = "0.0.0.0:443"/' /etc/hookbox/hookbox.toml
info "ip_unprivileged_port_start=$(cat /proc/sys/net/ipv4/ip_unprivileged_port_start); $(grep '^listen' /etc/hookbox/hookbox.toml)"
dropin=/etc/systemd/system/hookbox.service.d
mkdir -p "$dropin"
grep -v '^PrivateUsers=' readme-port443.ini >"$dropin/override.conf"
info "drop-in without PrivateUsers=no: $(tr '\n' ' ' <"$dropin/override.conf")"
systemctl daemon-reload || true
since=$(date '+%Y-%m-%d %H:%M:%S')
sleep 1
systemctl restart hookbox 2>&1 | sed 's/^/  | /' || true
sleep 1
state=$(systemctl is-active hookbox || true)
cap_log=$(journalctl -u hookbox --since "$since" --no-pager -o cat)
info "socket $(systemctl is-active hookbox.socket || true); hookbox $state, PrivateUsers=$(prop PrivateUsers) CapabilityBoundingSet=$(prop CapabilityBoundingSet) AmbientCapabilities=$(prop AmbientCapabilities)"
bind_line=$(grep -F 'binding the public listener' <<<"$cap_log" | head -n1 | cut -c1-300 || true)
if [[ $state != active ]] && grep -q 'binding the public listener 0.0.0.0:443' <<<"$cap_log" &&
    grep -q 'Permission denied' <<<"$cap_log"; then
    pass cap-privateusers-yes-denied "hookbox $state; journal: $bind_line"
else
    fail cap-privateusers-yes-denied "hookbox $state, journal: $(tr '\n' ' ' <<<"$cap_log" | cut -c1-500)"
fi
status_is cap-privateusers-yes-no-answer 000 "$(post_github vm-test-gh-cap-1 "$gh_secret" 2>/dev/null)"

cp readme-port443.ini "$dropin/override.conf"
info "drop-in as the README writes it: $(tr '\n' ' ' <"$dropin/override.conf")"
systemctl daemon-reload
systemctl reset-failed hookbox || true
since=$(date '+%Y-%m-%d %H:%M:%S')
sleep 1
systemctl restart hookbox 2>&1 | sed 's/^/  | /' || true
cap_log=$(journalctl -u hookbox --since "$since" --no-pager -o cat)
holders=$(listeners_on 443)
if [[ $(systemctl is-active hookbox || true) == active && $holders == "$(prop MainPID)/hookbox" ]] &&
    ! grep -q 'socket activation' <<<"$cap_log"; then
    pass cap-privateusers-no-binds "hookbox active, PrivateUsers=$(prop PrivateUsers), port 443 bound by: $holders"
else
    fail cap-privateusers-no-binds "hookbox $(systemctl is-active hookbox || true), 443 held by: $holders; journal: $(tr '\n' ' ' <<<"$cap_log" | cut -c1-400)"
fi
status_is cap-privateusers-no-post-202 202 "$(post_github vm-test-gh-cap-2 "$gh_secret")"

# --- 13. Back to the README's plain install ----------------------------------
rm -rf "$dropin"
cp /root/hookbox.toml.orig /etc/hookbox/hookbox.toml
systemctl daemon-reload
systemctl reset-failed hookbox 2>/dev/null || true
systemctl restart hookbox || true
PUBLIC=http://127.0.0.1:8080
status_is restored-post-8080-202 202 "$(post_github vm-test-gh-4 "$gh_secret")"

if ((failures)); then
    info "--- journalctl -u hookbox ---"
    journalctl -u hookbox -b --no-pager | tail -n 60 | sed 's/^/  | /'
fi
echo "VMTEST DONE failures=$failures"
