#!/usr/bin/env bash
# A single-node Slurm cluster on localhost, for tests and CI (Debian 12, run as root, no systemd).
#
#   tools/local-slurm.sh start  [DIR]   install packages if missing, write configs, start daemons,
#                                       wait until the node is idle and sacct answers
#   tools/local-slurm.sh stop   [DIR]   stop the daemons this script recorded in DIR, nothing else
#   tools/local-slurm.sh status [DIR]   which recorded daemons run; sinfo when the cluster is up
#   tools/local-slurm.sh env    [DIR]   print `export SLURM_CONF=DIR/etc/slurm.conf`
#   tools/local-slurm.sh install        only install the Debian packages (what start does first)
#
# DIR (default /tmp/inferlab-slurm) holds everything: configs (DIR/etc), munge key and socket,
# MariaDB data, Slurm state, logs (DIR/log) and the pids this script started (DIR/pids).
# Outside DIR, only one thing is written: /etc/slurm/slurm.conf, a symbolic link to
# DIR/etc/slurm.conf, made at start and removed at stop (start refuses to replace a real file or
# a link to a cluster that still has its config). Clients could use SLURM_CONF=DIR/etc/slurm.conf,
# but the Snakemake jobstep plugin (0.6.1) drops SLURM_CONF before the `srun` inside each job,
# so that srun only finds the cluster through the default path.
#
# The node is `localhost`, with every CPU and 90 % of the memory of this machine, in two
# partitions: `cpu` (the default) and `gpu`. Both hold the same node, which advertises
# LOCAL_SLURM_GPUS fake GPUs (`Gres=gpu:N`, default 1) so that jobs asking for `--gres=gpu:1`
# can be scheduled; the "GPU" is a device file (/dev/tty0.., or /dev/null for one), not a GPU.
# Accounting (slurmdbd + a private MariaDB) is on, so `sacct` answers, with an account `inferlab`.
#
# Settings (environment):
#   LOCAL_SLURM_PORT_BASE  first of four loopback ports: slurmctld, slurmd, slurmdbd, MariaDB
#                          (default 6817, so 6817-6820)
#   LOCAL_SLURM_GPUS       fake GPUs on the node (default 1; 0 = none)
#   LOCAL_SLURM_TIMEOUT    seconds to wait for each daemon and for the idle node (default 60)
#   LOCAL_SLURM_NO_INSTALL 1 = never run apt-get; fail if a package is missing
set -euo pipefail
export PATH=$PATH:/usr/local/sbin:/usr/sbin:/sbin

PROG=$(basename "$0")
CLUSTER=inferlab
ACCOUNT=inferlab
NODE=localhost
PACKAGES=(munge slurmctld slurmd slurm-client slurmdbd mariadb-server)
# The daemons in start order; stop goes the other way.
DAEMONS=(munged mariadbd slurmdbd slurmctld slurmd)

die() { echo "$PROG: error: $*" >&2; exit 1; }
say() { echo "$PROG: $*"; }

usage() {
    sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

# ---------------------------------------------------------------------------- settings
setup_paths() {
    DIR=${1:-/tmp/inferlab-slurm}
    case $DIR in
        /*) ;;
        *) DIR=$(pwd)/$DIR ;;
    esac
    DIR=${DIR%/}
    [[ $DIR =~ ^[A-Za-z0-9_./-]+$ ]] \
        || die "state directory '$DIR' has characters other than letters, digits, _ . / -"
    ETC=$DIR/etc
    LOG=$DIR/log
    RUN=$DIR/run
    MUNGE=$DIR/munge
    PIDS=$DIR/pids
    export SLURM_CONF=$ETC/slurm.conf
}

read_settings() {
    PORT_BASE=${LOCAL_SLURM_PORT_BASE:-6817}
    GPUS=${LOCAL_SLURM_GPUS:-1}
    TIMEOUT=${LOCAL_SLURM_TIMEOUT:-60}
    if ! [[ $PORT_BASE =~ ^[0-9]{4,5}$ ]] || ((PORT_BASE < 1024 || PORT_BASE > 65532)); then
        die "LOCAL_SLURM_PORT_BASE='$PORT_BASE' is not a port number in 1024..65532"
    fi
    if ! [[ $GPUS =~ ^[0-9]$ ]] || ((GPUS > 8)); then
        die "LOCAL_SLURM_GPUS='$GPUS' is not a whole number in 0..8"
    fi
    if ! [[ $TIMEOUT =~ ^[0-9]{1,5}$ ]] || ((TIMEOUT < 1)); then
        die "LOCAL_SLURM_TIMEOUT='$TIMEOUT' is not a whole number of seconds in 1..99999"
    fi
    CTLD_PORT=$PORT_BASE
    SLURMD_PORT=$((PORT_BASE + 1))
    DBD_PORT=$((PORT_BASE + 2))
    MYSQL_PORT=$((PORT_BASE + 3))
}

# ---------------------------------------------------------------------------- processes
# DIR/pids has one line per daemon started: NAME PID STARTTIME (field 22 of /proc/PID/stat),
# so a pid reused by another process after ours exited is never taken for ours.

proc_starttime() {  # PID -> start time in clock ticks, or nothing
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
    stat=${stat##*) }          # drop "pid (comm) "; comm may hold spaces
    local fields
    read -r -a fields <<<"$stat"  # fields[0] is the state, fields[19] the start time
    echo "${fields[19]}"
}

proc_state() {  # PID -> one-letter state, or nothing
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
    stat=${stat##*) }
    echo "${stat%% *}"
}

# Is the recorded process alive (same pid, same start time, not a zombie)?
recorded_alive() {  # PID STARTTIME
    local state
    state=$(proc_state "$1")
    [[ -n $state && $state != Z && $state != X ]] || return 1
    [[ $(proc_starttime "$1") == "$2" ]]
}

record_pid() {  # NAME PID
    local st
    st=$(proc_starttime "$2")
    [[ -n $st ]] || fail_start "$1 (pid $2) exited at once" "$1.out" "$1.log"
    echo "$1 $2 $st" >>"$PIDS"
}

# Start NAME as a daemon in the foreground of its own session, its output in LOG/NAME.out.
launch() {  # NAME COMMAND...
    local name=$1
    shift
    # fd 9 is the lock on DIR: the daemon must not keep it.
    setsid "$@" </dev/null >>"$LOG/$name.out" 2>&1 9>&- &
    local pid=$!
    sleep 0.2
    record_pid "$name" "$pid"
}

# Prints "NAME PID STARTTIME" for each recorded daemon still alive.
alive_recorded() {
    [[ -f $PIDS ]] || return 0
    local name pid st
    while read -r name pid st; do
        [[ -n ${name:-} ]] || continue
        if recorded_alive "$pid" "$st"; then echo "$name $pid $st"; fi
    done <"$PIDS"
}

stop_recorded() {
    [[ -f $PIDS ]] || { say "nothing recorded in $PIDS; nothing to stop"; return 0; }
    local lines=() name pid st i
    mapfile -t lines < <(alive_recorded)
    if ((${#lines[@]} == 0)); then
        say "no recorded daemon is running (DIR=$DIR)"
        rm -f "$PIDS"
        return 0
    fi
    # Jobs still on our cluster are ours: cancel them so slurmstepd processes end too.
    if printf '%s\n' "${lines[@]}" | grep -q '^slurmctld '; then
        local jobs
        jobs=$(timeout 10 squeue -h -o %A 2>/dev/null | tr '\n' ' ' || true)
        if [[ -n ${jobs// /} ]]; then
            say "cancelling jobs still queued or running: $jobs"
            # shellcheck disable=SC2086
            timeout 10 scancel $jobs 2>/dev/null || true
            sleep 1
        fi
    fi
    # Reverse start order: slurmd, slurmctld, slurmdbd, mariadbd, munged.
    for ((i = ${#lines[@]} - 1; i >= 0; i--)); do
        read -r name pid st <<<"${lines[i]}"
        kill -TERM "$pid" 2>/dev/null || true
        local waited=0
        while recorded_alive "$pid" "$st" && ((waited < 150)); do
            sleep 0.1
            waited=$((waited + 1))
        done
        if recorded_alive "$pid" "$st"; then
            say "$name (pid $pid) ignored SIGTERM for 15 s; sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            sleep 0.5
        fi
        if recorded_alive "$pid" "$st"; then
            echo "$PROG: error: $name (pid $pid) is still running" >&2
            return 1
        fi
        say "stopped $name (pid $pid)"
    done
    rm -f "$PIDS"
}

# ---------------------------------------------------------------------------- /etc/slurm link
ETC_LINK=/etc/slurm/slurm.conf

link_default_conf() {
    if [[ -L $ETC_LINK ]]; then
        local target
        target=$(readlink "$ETC_LINK")
        [[ $target == "$SLURM_CONF" ]] && return 0
        if [[ -e $target ]]; then
            local msg="$ETC_LINK links to $target, the config of another cluster;"
            fail_start "$msg stop that one first (or remove the link if it is stale)"
        fi
        rm -f "$ETC_LINK"               # dangling: its cluster's directory is gone
    elif [[ -e $ETC_LINK ]]; then
        local msg="$ETC_LINK is a real file, not ours;"
        fail_start "$msg Slurm jobs started by Snakemake would read it (move it away first)"
    fi
    mkdir -p "$(dirname "$ETC_LINK")"
    ln -s "$SLURM_CONF" "$ETC_LINK"
}

unlink_default_conf() {
    if [[ -L $ETC_LINK && $(readlink "$ETC_LINK") == "$SLURM_CONF" ]]; then
        rm -f "$ETC_LINK"
        say "removed the link $ETC_LINK"
    fi
}

# ---------------------------------------------------------------------------- waiting
now_ms() { local t=${EPOCHREALTIME/[.,]/}; echo $((t / 1000)); }
since_t0() {  # seconds since T0, one decimal
    local d=$(($(now_ms) - T0))
    printf '%d.%d' $((d / 1000)) $((d % 1000 / 100))
}

# wait_for WHAT COMMAND... : run COMMAND until it succeeds or TIMEOUT seconds pass.
wait_for() {
    local what=$1
    shift
    local deadline=$((SECONDS + TIMEOUT))
    until "$@" >/dev/null 2>&1; do
        if ((SECONDS >= deadline)); then
            return 1
        fi
        sleep 0.3
    done
    say "$what ready after $(since_t0) s"
}

fail_start() {  # MESSAGE LOGNAME...
    local msg=$1
    shift
    echo "$PROG: error: $msg" >&2
    local f
    for f in "$@"; do
        if [[ -s $LOG/$f ]]; then
            echo "---- last lines of $LOG/$f" >&2
            tail -n 15 "$LOG/$f" >&2
        fi
    done
    echo "$PROG: stopping the daemons started so far" >&2
    stop_recorded >&2 || true
    unlink_default_conf >&2
    exit 1
}

port_busy() {  # PORT: true if something accepts connections on 127.0.0.1:PORT
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# ---------------------------------------------------------------------------- install
missing_packages() {
    local p
    for p in "${PACKAGES[@]}"; do
        [[ $(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null) == installed ]] || echo "$p"
    done
}

install_packages() {
    local missing
    mapfile -t missing < <(missing_packages)
    ((${#missing[@]} == 0)) && return 0
    [[ ${LOCAL_SLURM_NO_INSTALL:-0} == 1 ]] \
        && die "packages missing and LOCAL_SLURM_NO_INSTALL=1: ${missing[*]}"
    ((EUID == 0)) || die "packages missing (${missing[*]}) and not root, so cannot apt-get install"
    command -v apt-get >/dev/null || die "packages missing (${missing[*]}) and no apt-get here"
    say "installing ${missing[*]} (apt-get)"
    # Keep the packages' maintainer scripts from starting system daemons (munge, mariadb)
    # that this script would not own: a policy-rc.d that denies, for this install only.
    local policy=/usr/sbin/policy-rc.d ours=0
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy"
        chmod 755 "$policy"
        ours=1
    fi
    local rc=0
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        "${missing[@]}" >"$DIR/apt.log" 2>&1; then
        say "apt-get install failed; running apt-get update and trying once more"
        DEBIAN_FRONTEND=noninteractive apt-get update -q >>"$DIR/apt.log" 2>&1 || true
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
            "${missing[@]}" >>"$DIR/apt.log" 2>&1 || rc=$?
    fi
    ((ours)) && rm -f "$policy"
    if ((rc != 0)); then
        tail -n 20 "$DIR/apt.log" >&2
        die "apt-get install ${missing[*]} failed (exit $rc); full log in $DIR/apt.log"
    fi
}

# ---------------------------------------------------------------------------- configuration
write_configs() {
    mkdir -p "$ETC" "$LOG" "$RUN" "$DIR/state/ctld" "$DIR/state/d"
    chmod 755 "$DIR"

    # munge: key, socket, pid and log under DIR/munge, owned by the munge user (key 0400).
    id munge >/dev/null 2>&1 || die "user 'munge' does not exist (is the munge package installed?)"
    mkdir -p "$MUNGE"
    if [[ ! -s $MUNGE/munge.key ]]; then
        dd if=/dev/urandom of="$MUNGE/munge.key" bs=1024 count=1 status=none
    fi
    chown -R munge:munge "$MUNGE"
    chmod 755 "$MUNGE"
    chmod 400 "$MUNGE/munge.key"

    # The node: this machine's real topology (slurmd -C), so slurmd never finds it invalid.
    local hw
    hw=$(slurmd -C 2>/dev/null | head -n 1) || true
    [[ $hw == NodeName=* ]] || die "slurmd -C did not print the node's hardware (got '$hw')"
    hw=${hw#NodeName=* }                      # drop NodeName=<host>
    local mem=${hw##*RealMemory=}
    mem=${mem%% *}
    [[ $mem =~ ^[0-9]+$ ]] || die "no RealMemory in slurmd -C output '$hw'"
    hw="${hw%RealMemory=*}RealMemory=$((mem * 9 / 10))"

    local gres_node="" gres_lines="" files=() i
    if ((GPUS > 0)); then
        for ((i = 0; i < GPUS; i++)); do files+=("/dev/tty$i"); done
        local f ok=1
        for f in "${files[@]}"; do [[ -c $f ]] || ok=0; done
        if ((!ok)); then
            ((GPUS == 1)) \
                || die "LOCAL_SLURM_GPUS=$GPUS needs the device files ${files[*]}; some are missing"
            files=(/dev/null)
        fi
        gres_node=" Gres=gpu:$GPUS"
        for f in "${files[@]}"; do
            gres_lines+="NodeName=$NODE Name=gpu File=$f"$'\n'
        done
    fi

    cat >"$ETC/slurm.conf" <<EOF
# Written by tools/local-slurm.sh; rewritten at every start.
ClusterName=$CLUSTER
SlurmctldHost=$NODE
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$MUNGE/munge.socket
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1000
ReturnToService=2
# Refuse at submission what the node can never run (else such a job pends forever).
EnforcePartLimits=ALL
MinJobAge=300
MailProg=/bin/true
GresTypes=gpu
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$DBD_PORT
# With munge, the socket for connections to slurmdbd (AuthInfo is used for the rest only).
AccountingStoragePass=$MUNGE/munge.socket
AccountingStorageTRES=gres/gpu
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
JobCompType=jobcomp/none
StateSaveLocation=$DIR/state/ctld
SlurmdSpoolDir=$DIR/state/d
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd.log
NodeName=$NODE NodeHostname=$NODE NodeAddr=127.0.0.1 $hw$gres_node State=UNKNOWN
PartitionName=cpu Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes=$NODE Default=NO MaxTime=INFINITE State=UP
EOF

    printf '# Written by tools/local-slurm.sh\n%s' "$gres_lines" >"$ETC/gres.conf"

    # MariaDB password for the slurm user: made once, kept with the database.
    if [[ ! -s $DIR/db.pass ]]; then
        (umask 077 && head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$DIR/db.pass")
    fi
    (
        umask 077
        cat >"$ETC/slurmdbd.conf" <<EOF
# Written by tools/local-slurm.sh; rewritten at every start.
AuthType=auth/munge
AuthInfo=socket=$MUNGE/munge.socket
DbdHost=localhost
DbdPort=$DBD_PORT
SlurmUser=root
LogFile=$LOG/slurmdbd.log
PidFile=$RUN/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$MYSQL_PORT
StorageUser=slurm
StoragePass=$(cat "$DIR/db.pass")
StorageLoc=slurm_acct_db
EOF
    )
    chmod 600 "$ETC/slurmdbd.conf"
}

# ---------------------------------------------------------------------------- checks
munge_ok() { munge -n -S "$MUNGE/munge.socket" | unmunge -S "$MUNGE/munge.socket"; }
mysql_ok() { mariadb-admin --no-defaults -S "$RUN/mysqld.sock" -u root ping; }
dbd_ok() { sacctmgr -n -P list cluster format=cluster; }
ctld_ok() { scontrol ping | grep -q 'is UP'; }
node_idle() {
    local states
    states=$(sinfo -h -N -n "$NODE" -o '%t' 2>/dev/null | sort -u)
    [[ $states == idle ]]
}
sacct_ok() { sacct -n -X -S now-1minutes -o JobID; }

# ---------------------------------------------------------------------------- commands
cmd_start() {
    read_settings
    mkdir -p "$DIR"
    exec 9>"$DIR/.lock"
    flock -n 9 || die "another '$PROG' is working on $DIR (lock $DIR/.lock held)"

    local alive=()
    mapfile -t alive < <(alive_recorded)
    if ((${#alive[@]} == ${#DAEMONS[@]})); then
        say "already running in $DIR ($(printf '%s ' "${alive[@]%% *}"))"
        return 0
    fi
    if ((${#alive[@]} > 0)); then
        say "only part of the cluster runs (${alive[*]%% *}); stopping it and starting afresh"
        stop_recorded
    fi
    rm -f "$PIDS"

    T0=$(now_ms)
    install_packages
    local t_install
    t_install=$(since_t0)

    local p
    for p in "$CTLD_PORT" "$SLURMD_PORT" "$DBD_PORT" "$MYSQL_PORT"; do
        port_busy "$p" && die "port $p on 127.0.0.1 is in use by another program; choose" \
            "other ports with LOCAL_SLURM_PORT_BASE (now $PORT_BASE, uses $PORT_BASE..$MYSQL_PORT)"
    done
    write_configs
    : >"$PIDS"
    link_default_conf

    # munge, as the munge user (munged refuses root), with its own key and socket.
    launch munged setpriv --reuid=munge --regid=munge --init-groups \
        munged -F --key-file="$MUNGE/munge.key" --socket="$MUNGE/munge.socket" \
        --pid-file="$MUNGE/munged.pid" --log-file="$MUNGE/munged.log" \
        --seed-file="$MUNGE/munged.seed"
    wait_for munged munge_ok || fail_start "munged did not answer within ${TIMEOUT} s" \
        munged.out ../munge/munged.log

    # MariaDB, private to DIR: loopback TCP for slurmdbd, a socket in DIR for the setup.
    local fresh_db=0
    if [[ ! -d $DIR/mysql/mysql ]]; then
        fresh_db=1
        rm -rf "$DIR/mysql"
        mariadb-install-db --no-defaults --datadir="$DIR/mysql" --user=root \
            --auth-root-authentication-method=socket --skip-test-db \
            >"$LOG/mariadb-install-db.log" 2>&1 \
            || fail_start "mariadb-install-db failed" mariadb-install-db.log
    fi
    launch mariadbd mariadbd --no-defaults --datadir="$DIR/mysql" --user=root \
        --socket="$RUN/mysqld.sock" --port="$MYSQL_PORT" --bind-address=127.0.0.1 \
        --skip-name-resolve --pid-file="$RUN/mysqld.pid" --log-error="$LOG/mariadbd.log" \
        --innodb-buffer-pool-size=32M --innodb-log-file-size=16M \
        --innodb-lock-wait-timeout=900 --performance-schema=OFF
    wait_for mariadbd mysql_ok || fail_start "mariadbd did not answer within ${TIMEOUT} s" \
        mariadbd.log mariadbd.out
    if ((fresh_db)); then
        if ! mariadb --no-defaults -S "$RUN/mysqld.sock" -u root \
            >"$LOG/mariadb-setup.log" 2>&1 <<EOF
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$(cat "$DIR/db.pass")';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
FLUSH PRIVILEGES;
EOF
        then
            fail_start "creating the slurm database and its user failed" mariadb-setup.log
        fi
    fi

    launch slurmdbd slurmdbd -D
    wait_for slurmdbd dbd_ok || fail_start "slurmdbd did not answer within ${TIMEOUT} s" \
        slurmdbd.log slurmdbd.out
    if ! sacctmgr -n -P list cluster format=cluster | grep -qx "$CLUSTER"; then
        sacctmgr -i add cluster "$CLUSTER" >"$LOG/sacctmgr.log" 2>&1 \
            || fail_start "sacctmgr add cluster $CLUSTER failed" sacctmgr.log
    fi
    if ! sacctmgr -n -P list account format=account | grep -qx "$ACCOUNT"; then
        sacctmgr -i add account "$ACCOUNT" cluster="$CLUSTER" \
            description="local test cluster" organization=inferlab >>"$LOG/sacctmgr.log" 2>&1 \
            || fail_start "sacctmgr add account $ACCOUNT failed" sacctmgr.log
        sacctmgr -i add user root account="$ACCOUNT" cluster="$CLUSTER" \
            >>"$LOG/sacctmgr.log" 2>&1 \
            || fail_start "sacctmgr add user root to account $ACCOUNT failed" sacctmgr.log
    fi

    launch slurmctld slurmctld -D
    wait_for slurmctld ctld_ok || fail_start "slurmctld did not answer within ${TIMEOUT} s" \
        slurmctld.log slurmctld.out
    launch slurmd slurmd -D -N "$NODE"
    # A node left down or drained by an earlier run with another config is resumed once.
    local deadline=$((SECONDS + TIMEOUT)) resumed=0 states
    until node_idle; do
        states=$(sinfo -h -N -n "$NODE" -o '%t' 2>/dev/null | sort -u | tr '\n' ' ')
        if ((!resumed)) && [[ $states =~ (down|drain|drng|inval|fail) ]]; then
            scontrol update nodename="$NODE" state=resume >/dev/null 2>&1 || true
            resumed=1
        fi
        if ((SECONDS >= deadline)); then
            local reason
            reason=$(sinfo -h -N -n "$NODE" -o '%E' 2>/dev/null | head -n 1)
            local msg="node $NODE not idle within ${TIMEOUT} s"
            fail_start "$msg (state '${states% }', reason '$reason')" \
                slurmd.log slurmd.out slurmctld.log
        fi
        sleep 0.3
    done
    say "node $NODE idle after $(since_t0) s"
    wait_for sacct sacct_ok || fail_start "sacct did not answer within ${TIMEOUT} s" \
        slurmdbd.log slurmctld.log
    say "cluster '$CLUSTER' up in $DIR after $(since_t0) s (of which installing ${t_install} s)"
    sinfo -o '%P %a %D %t %c %m %G'
    say "clients find it through $ETC_LINK (a link to $SLURM_CONF)"
}

cmd_stop() {
    [[ -d $DIR ]] || { say "no state directory $DIR; nothing to stop"; return 0; }
    exec 9>"$DIR/.lock"
    flock -w 30 9 || die "another '$PROG' is working on $DIR (lock $DIR/.lock held)"
    stop_recorded
    unlink_default_conf
}

cmd_status() {
    local name pid st n_alive=0 n=0
    if [[ ! -f $PIDS ]]; then
        say "not running (nothing recorded in $PIDS)"
        return 3
    fi
    while read -r name pid st; do
        [[ -n ${name:-} ]] || continue
        n=$((n + 1))
        if recorded_alive "$pid" "$st"; then
            echo "  $name pid $pid running"
            n_alive=$((n_alive + 1))
        else
            echo "  $name pid $pid stopped"
        fi
    done <"$PIDS"
    if ((n_alive == ${#DAEMONS[@]})); then
        sinfo -o '%P %a %D %t %c %m %G' || true
        say "running in $DIR (config $SLURM_CONF)"
        return 0
    fi
    if ((n_alive == 0)); then
        say "not running"
        return 3
    fi
    say "partly running ($n_alive of ${#DAEMONS[@]} daemons)"
    return 1
}

main() {
    (($# >= 1 && $# <= 2)) || usage
    local cmd=$1
    setup_paths "${2:-}"
    case $cmd in
        start) cmd_start ;;
        stop) cmd_stop ;;
        status) cmd_status ;;
        env) echo "export SLURM_CONF=$SLURM_CONF" ;;
        install)
            mkdir -p "$DIR"
            install_packages
            say "installed: ${PACKAGES[*]}"
            ;;
        *) echo "$PROG: unknown command '$cmd'" >&2; usage ;;
    esac
}

main "$@"
