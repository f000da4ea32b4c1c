#!/usr/bin/env bash
# A single-node Slurm cluster for tests: munge, MariaDB, slurmdbd, slurmctld and slurmd from Debian's packages,
# started as plain root processes (no systemd, no cgroups), everything they write kept in one state folder.
#
#   scripts/slurm-local.sh start    install the packages if missing, start what is not running, wait for the node
#   scripts/slurm-local.sh stop     cancel the cluster's jobs, stop the daemons this script started (reverse order)
#   scripts/slurm-local.sh status   each daemon's state and sinfo; exit 0 all running, 3 all stopped, 1 partly
#
# Environment: GRADEFF_SLURM_DIR (state folder, default gradeff-slurm in $TMPDIR or /tmp), GRADEFF_SLURM_PORT
# (slurmctld's port, default 6817; slurmd and slurmdbd use the next two), GRADEFF_SLURM_TIMEOUT (seconds each daemon
# may take to become ready, default 60).
# Exit codes of start: 0 running, 1 a daemon failed to start, 2 Slurm cannot run here (no root, no apt-get, the
# install failed): callers such as the test fixture skip on 2 and fail on 1.
# Clients need SLURM_CONF: `source "$GRADEFF_SLURM_DIR/env.sh"` (start prints the export line).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TEMPLATES="$REPO/scripts/slurm"
STATE="${GRADEFF_SLURM_DIR:-$(dirname "$(mktemp -u)")/gradeff-slurm}"
CTLD_PORT="${GRADEFF_SLURM_PORT:-6817}"
SLURMD_PORT=$((CTLD_PORT + 1))
DBD_PORT=$((CTLD_PORT + 2))
READY_TIMEOUT="${GRADEFF_SLURM_TIMEOUT:-60}"
# Start order; stop runs it backwards.
DAEMONS=(munged mariadbd slurmdbd slurmctld slurmd)
PACKAGES=(slurmctld slurmd slurm-client munge slurmdbd mariadb-server)
# The daemons live in /usr/sbin, which a non-login shell's PATH may lack.
export PATH="$PATH:/usr/sbin:/sbin"

MUNGE_SOCKET="$STATE/munge/run/munge.socket"
MYSQL_SOCKET="$STATE/mysql/mysqld.sock"
export SLURM_CONF="$STATE/etc/slurm.conf"
# slurmdbd's MySQL client library finds the state folder's MariaDB socket through this.
export MYSQL_UNIX_PORT="$MYSQL_SOCKET"
# Every daemon started here carries this variable: a recorded PID is ours only while its process still has it,
# so a PID reused by another process is never stopped, and stop finds the job steps (slurmstepd) our slurmd left.
MARK="GRADEFF_SLURM_DAEMON_OF=$STATE"

log() { echo "slurm-local: $*"; }
fail() { echo "slurm-local: error: $*" >&2; exit 1; }
unavailable() { echo "slurm-local: unavailable: $*" >&2; exit 2; }

# --- processes ----------------------------------------------------------------------------------------------

pid_file() { echo "$STATE/run/$1.pid"; }

running_pid() {  # name -> prints the PID and succeeds if that daemon of ours runs
    local file pid
    file="$(pid_file "$1")"
    [[ -s $file ]] || return 1
    pid="$(<"$file")"
    carries_mark "$pid" || return 1
    echo "$pid"
}

carries_mark() {  # pid: its environment holds this state folder's mark (a zombie's environment is empty)
    grep -qzxF "$MARK" "/proc/$1/environ" 2>/dev/null
}

is_running() { running_pid "$1" >/dev/null; }

alive() {  # pid: the process exists and is not a zombie (this container's init reaps late)
    [[ -r /proc/$1/status ]] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null
}

launch() {  # name command...: start a daemon in the foreground mode of its own, detached, output to its log
    local name="$1"
    shift
    # setsid: the daemon leaves the caller's session, so a Ctrl-C there does not reach it; stdin/stdout/stderr
    # are redirected so a caller reading this script's output (subprocess pipes) is not held open by it.
    # 9>&-: the daemon must not inherit the lock below, or it would hold it for its whole life.
    env "$MARK" setsid "$@" </dev/null >>"$STATE/log/$name.out" 2>&1 9>&- &
    echo $! >"$(pid_file "$name")"
}

lock() {  # one start or stop at a time per state folder (say, two test sessions starting the same cluster)
    mkdir -p "$STATE"
    exec 9>"$STATE/.lock"
    flock -w 600 9 || fail "another slurm-local.sh has held $STATE/.lock for 10 minutes"
}

show_logs() {  # name: the last lines of everything the daemon wrote
    local file
    for file in "$STATE/log/$1.out" "$STATE/log/$1.log"; do
        if [[ -s $file ]]; then
            echo "--- tail of $file" >&2
            tail -n 25 "$file" >&2
        fi
    done
}

wait_until() {  # name what command...: poll the command until it succeeds, the daemon dies or time runs out
    local name="$1" what="$2" deadline=$((SECONDS + READY_TIMEOUT)) pid
    pid="$(<"$(pid_file "$name")")"
    shift 2
    until "$@" >/dev/null 2>&1; do
        # Not is_running: until `env` has exec'd the daemon, /proc/PID/environ still lacks the mark.
        if ! alive "$pid"; then
            show_logs "$name"
            fail "$name exited before $what"
        fi
        if ((SECONDS >= deadline)); then
            show_logs "$name"
            fail "$name: $what did not happen within ${READY_TIMEOUT} s"
        fi
        sleep 0.3
    done
}

stop_daemon() {  # name: stop it if it runs and is ours
    local pid
    if pid="$(running_pid "$1")"; then
        stop_pid "$1" "$pid"
    fi
    rm -f "$(pid_file "$1")"
}

stop_pid() {  # name pid: SIGTERM, then SIGKILL after 30 s
    local name="$1" pid="$2" i
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 300; i++)); do
        alive "$pid" || break
        sleep 0.1
    done
    if alive "$pid"; then
        log "$name (pid $pid) ignored SIGTERM for 30 s; killing it"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    log "stopped $name (pid $pid)"
}

STARTED_NOW=()

rollback() {  # a start that failed stops what it started, so that no half cluster is left running
    local i name pid
    for ((i = ${#STARTED_NOW[@]} - 1; i >= 0; i--)); do
        name="${STARTED_NOW[i]}"
        # The recorded PID, not running_pid: a daemon that env has not exec'd yet lacks the mark.
        pid="$(cat "$(pid_file "$name")" 2>/dev/null)" || continue
        if alive "$pid"; then
            stop_pid "$name" "$pid" >&2
        fi
        rm -f "$(pid_file "$name")"
    done
}

# --- installation and configuration ------------------------------------------------------------------------

ensure_packages() {
    local missing=() cmd started
    for cmd in munged mungekey mariadbd mariadb-install-db mariadb-admin slurmdbd slurmctld slurmd sinfo sacctmgr; do
        command -v "$cmd" >/dev/null || missing+=("$cmd")
    done
    ((${#missing[@]} == 0)) && return 0
    command -v apt-get >/dev/null || unavailable "missing ${missing[*]} and there is no apt-get to install them"
    log "installing ${PACKAGES[*]} (missing: ${missing[*]})"
    started=$SECONDS
    # A stale package list is the usual reason for a failed install: update it once and try again.
    if ! apt_install && ! { apt-get update -qq >>"$STATE/log/apt.log" 2>&1 && apt_install; }; then
        tail -n 20 "$STATE/log/apt.log" >&2
        unavailable "apt-get could not install ${PACKAGES[*]} (log: $STATE/log/apt.log)"
    fi
    log "installed in $((SECONDS - started)) s"
}

apt_install() {
    # Lock::Timeout: another apt-get at work (a CI step installing something) is waited for, not taken as failure.
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=300 "${PACKAGES[@]}" \
        >>"$STATE/log/apt.log" 2>&1
}

make_folders() {
    mkdir -p "$STATE"/{etc,log,run,munge/run,mysql,spool/slurmctld,spool/slurmd}
    # munged refuses a socket folder others could write to, and clients must be able to enter it.
    chmod 755 "$STATE" "$STATE/munge" "$STATE/munge/run"
    chmod 700 "$STATE/etc" "$STATE/mysql"
}

machine() {  # the first line of `slurmd -C`: NodeName=... CPUs=... RealMemory=...
    local out
    out="$(slurmd -C)" || fail "slurmd -C could not describe this machine"
    echo "${out%%$'\n'*}"
}

check_reachable() {  # munged refuses a socket below a folder that not everyone may enter (say, mode 700)
    local dir="$1"
    while [[ $dir != / ]]; do
        dir="$(dirname "$dir")"
        if [[ -d $dir && $(stat -c %A "$dir") != *[xt] ]]; then
            fail "munged needs every folder above the state folder to be searchable by all; $dir is not" \
                "(choose another GRADEFF_SLURM_DIR)"
        fi
    done
}

node_line() {  # this machine as `slurmd -C` sees it, with 10% of the memory left to everything else
    local line
    line="$(machine)"
    local memory="${line##*RealMemory=}"
    memory="${memory%% *}"
    [[ $memory =~ ^[0-9]+$ ]] || fail "no RealMemory in 'slurmd -C': $line"
    # Boards and NodeName's own value stay as slurmd prints them; NodeAddr pins the node to loopback so a
    # hostname that does not resolve does not matter.
    echo "${line/RealMemory=$memory/RealMemory=$((memory * 9 / 10))} NodeAddr=127.0.0.1 State=UNKNOWN"
}

node_name() {
    local line
    line="$(machine)"
    line="${line#NodeName=}"
    echo "${line%% *}"
}

db_password() {  # made once per state folder; only slurmdbd.conf (mode 600) and this file (600) hold it
    local file="$STATE/mysql/slurm.pass"
    if [[ ! -s $file ]]; then
        (umask 077 && od -An -N16 -tx1 /dev/urandom | tr -d ' \n' >"$file")
    fi
    cat "$file"
}

render() {  # template output: fill the @NAME@ placeholders
    local node
    node="$(node_name)"
    sed -e "s|@STATE@|$STATE|g" -e "s|@NODE@|$node|g" -e "s|@NODE_LINE@|$(node_line)|" \
        -e "s|@CTLD_PORT@|$CTLD_PORT|g" -e "s|@SLURMD_PORT@|$SLURMD_PORT|g" -e "s|@DBD_PORT@|$DBD_PORT|g" \
        -e "s|@MUNGE_SOCKET@|$MUNGE_SOCKET|g" -e "s|@DB_PASS@|$(db_password)|g" "$1" >"$2.new"
    mv "$2.new" "$2"
}

write_config() {
    render "$TEMPLATES/slurm.conf.in" "$STATE/etc/slurm.conf"
    chmod 644 "$STATE/etc/slurm.conf"
    # slurmdbd refuses a slurmdbd.conf that others can read (it holds StoragePass).
    (umask 077 && render "$TEMPLATES/slurmdbd.conf.in" "$STATE/etc/slurmdbd.conf")
    chmod 600 "$STATE/etc/slurmdbd.conf"
    printf 'export SLURM_CONF=%q\n' "$SLURM_CONF" >"$STATE/env.sh"
}

# --- daemons, in start order -------------------------------------------------------------------------------

munge_answers() { munge -n -S "$MUNGE_SOCKET" | unmunge -S "$MUNGE_SOCKET"; }

start_munged() {
    local key="$STATE/munge/munge.key"
    if [[ ! -s $key ]]; then
        mungekey --create --keyfile="$key" >/dev/null
        chmod 400 "$key"
    fi
    launch munged munged --foreground --socket="$MUNGE_SOCKET" --key-file="$key" \
        --pid-file="$STATE/run/munged.daemon.pid" --log-file="$STATE/log/munged.log" \
        --seed-file="$STATE/munge/munged.seed"
    wait_until munged "its socket answering" munge_answers
}

sql() { mariadb --no-defaults --socket="$MYSQL_SOCKET" --user=root -e "$1"; }

start_mariadbd() {
    local data="$STATE/mysql/data"
    if [[ ! -d $data/mysql ]]; then
        # --no-defaults: the system's /etc/mysql settings (datadir, socket, port) must not apply here.
        mariadb-install-db --no-defaults --user=root --datadir="$data" --auth-root-authentication-method=socket \
            --skip-test-db >>"$STATE/log/mariadbd.out" 2>&1 || { show_logs mariadbd; fail "mariadb-install-db failed"; }
    fi
    launch mariadbd mariadbd --no-defaults --user=root --datadir="$data" --socket="$MYSQL_SOCKET" \
        --pid-file="$STATE/run/mariadbd.daemon.pid" --log-error="$STATE/log/mariadbd.log" --skip-networking \
        --innodb-lock-wait-timeout=900
    wait_until mariadbd "answering on its socket" mariadb-admin --no-defaults --socket="$MYSQL_SOCKET" ping
    sql "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
         CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$(db_password)';
         GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';" || fail "could not create slurmdbd's database"
}

start_slurmdbd() {
    launch slurmdbd slurmdbd -D
    wait_until slurmdbd "answering sacctmgr" sacctmgr -n list cluster
}

register_accounts() {  # the cluster, an account and root (and the caller) in it; each only once
    if [[ -z $(sacctmgr -n -P list cluster gradeff format=cluster) ]]; then
        sacctmgr -i add cluster gradeff >/dev/null
    fi
    if [[ -z $(sacctmgr -n -P list account gradeff format=account) ]]; then
        sacctmgr -i add account gradeff cluster=gradeff description=tests organization=gradeff >/dev/null
    fi
    local user
    for user in root "${SUDO_USER:-root}"; do
        if [[ -z $(sacctmgr -n -P list user "$user" format=user) ]]; then
            sacctmgr -i add user "$user" account=gradeff cluster=gradeff >/dev/null
        fi
    done
}

ctld_up() { scontrol ping | grep -q 'is UP'; }

start_slurmctld() {
    launch slurmctld slurmctld -D
    wait_until slurmctld "answering scontrol ping" ctld_up
}

node_idle() { [[ $(sinfo -h -n "$(node_name)" -o %T) == idle ]]; }

start_slurmd() {
    launch slurmd slurmd -D -N "$(node_name)"
    wait_until slurmd "its node reading idle in sinfo" node_idle
}

# --- commands ----------------------------------------------------------------------------------------------

start() {
    local name up=0 started
    # First: as another user, neither the packages nor the daemons (SlurmUser=root) nor the state folder are ours.
    [[ $(id -u) == 0 ]] || unavailable "the cluster's daemons run as root (SlurmUser=root); this is uid $(id -u)"
    check_reachable "$STATE"
    lock
    for name in "${DAEMONS[@]}"; do
        is_running "$name" && up=$((up + 1))
    done
    if ((up == ${#DAEMONS[@]})); then
        log "already running (state: $STATE)"
        print_hint
        return 0
    fi
    mkdir -p "$STATE/log"
    ensure_packages
    started=$SECONDS
    make_folders
    write_config
    trap rollback EXIT
    for name in "${DAEMONS[@]}"; do
        if ! is_running "$name"; then
            STARTED_NOW+=("$name")
            "start_$name"
            log "started $name (pid $(running_pid "$name"))"
        fi
        if [[ $name == slurmdbd ]]; then
            register_accounts
        fi
    done
    trap - EXIT
    log "cluster up in $((SECONDS - started)) s (state: $STATE)"
    print_hint
}

print_hint() {
    log "clients need: export SLURM_CONF=$SLURM_CONF  (or: source $STATE/env.sh)"
}

cancel_jobs() {  # so that stopping slurmd leaves no job step behind
    local jobs i
    jobs="$(squeue -h -o %A 2>/dev/null)" || return 0
    [[ -n $jobs ]] || return 0
    log "cancelling jobs: $(echo "$jobs" | tr '\n' ' ')"
    # shellcheck disable=SC2086  # one job ID per word
    scancel $jobs 2>/dev/null || true
    for ((i = 0; i < 150; i++)); do
        [[ -z $(squeue -h -o %A 2>/dev/null) ]] && return 0
        sleep 0.1
    done
    log "jobs still listed after 15 s; stopping anyway"
}

stop_job_steps() {  # slurmstepd outlives slurmd by design: those our slurmd started carry its mark
    local dir pid
    for dir in /proc/[0-9]*; do
        pid="${dir#/proc/}"
        if [[ $(cat "$dir/comm" 2>/dev/null) != slurmstepd ]] || ! carries_mark "$pid"; then
            continue
        fi
        # The job's own processes (children of the step) go with it: they carry the job's environment, not the mark.
        log "killing job step $pid (slurmstepd) and its processes: $(descendants "$pid" | tr '\n' ' ')"
        # shellcheck disable=SC2046  # one PID per word
        kill -KILL "$pid" $(descendants "$pid") 2>/dev/null || true
    done
}

descendants() {  # pid: every process below it
    local child
    for child in $(ps -o pid= --ppid "$1"); do
        echo "$child"
        descendants "$child"
    done
}

stop() {
    local name up=0 i
    # A state folder that does not exist has nothing running: stop creates nothing.
    if [[ -d $STATE ]]; then
        lock
    fi
    for name in "${DAEMONS[@]}"; do
        is_running "$name" && up=$((up + 1))
    done
    if ((up == 0)); then
        log "not running (state: $STATE)"
        return 0
    fi
    if is_running slurmctld; then
        cancel_jobs
    fi
    for ((i = ${#DAEMONS[@]} - 1; i >= 0; i--)); do
        stop_daemon "${DAEMONS[i]}"
    done
    stop_job_steps
}

status() {
    local name pid up=0
    for name in "${DAEMONS[@]}"; do
        if pid="$(running_pid "$name")"; then
            echo "$name: running (pid $pid)"
            up=$((up + 1))
        else
            echo "$name: stopped"
        fi
    done
    if is_running slurmctld; then
        sinfo || true
    fi
    if ((up == ${#DAEMONS[@]})); then
        return 0
    elif ((up == 0)); then
        return 3
    fi
    return 1
}

case "${1:-}" in
    start | stop | status) "$1" ;;
    *)
        echo "usage: $0 start|stop|status" >&2
        exit 64
        ;;
esac
