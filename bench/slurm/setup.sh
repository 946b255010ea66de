#!/usr/bin/env bash
# A real single-node Slurm (with accounting) on this Debian 12 machine, for rehearsing a `gatedv sweep --executor
# slurm` study and for CI. Run as root; no systemd needed: the daemons are started directly.
#
#   bench/slurm/setup.sh           install the packages if missing, write the configs, start munged, MariaDB,
#                                  slurmdbd, slurmctld and slurmd, register the cluster, wait until it answers
#   bench/slurm/setup.sh --check   self-test: a batch job, its accounting record, an srun step, a 2-task job
#   bench/slurm/setup.sh --stop    stop the daemons that this script started (none that ran before it)
#
# Running it again changes nothing; after --stop it starts the same cluster again, queue and accounting kept.
# A munged or MariaDB that already runs (e.g. under systemd) is used as it is, and --stop leaves it running.
# One partition, `debug` (the default), holds this machine as one node with all its CPUs; memory is not scheduled.
# Configs: /etc/slurm/{slurm,slurmdbd}.conf; logs: /var/log/slurm/.
set -euo pipefail

PARTITION=debug
CLUSTER=gatedv
STATE=/run/gatedv-slurm  # NAME.pid for each daemon this script started
LOGS=/var/log/slurm
HOST=$(hostname -s)

die() { echo "slurm setup: $*" >&2; exit 1; }

# wait_for SECONDS WHAT COMMAND...: retry COMMAND every 0.2 s until it succeeds.
wait_for() {
    local deadline=$((SECONDS + $1)) what=$2
    shift 2
    until "$@" >/dev/null 2>&1; do
        ((SECONDS < deadline)) || die "timed out waiting for $what (logs in $LOGS)"
        sleep 0.2
    done
}

install_packages() {
    local packages=(munge slurm-wlm slurmctld slurmd slurmdbd slurm-client mariadb-server)
    local installed
    installed=$(dpkg-query -W -f='${Status}\n' "${packages[@]}" 2>/dev/null | grep -c ' installed$' || true)
    ((installed == ${#packages[@]})) && return 0
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
}

# put MODE USER:GROUP PATH < CONTENT: write PATH only where its content, mode or owner differs; note any change.
CHANGED=0
put() {
    local mode=$1 owner=$2 path=$3 new
    new=$(cat)
    if [[ -f $path && $(cat "$path") == "$new" && $(stat -c %a:%U:%G "$path") == "$mode:$owner" ]]; then
        return 0
    fi
    install -m "$mode" -o "${owner%%:*}" -g "${owner##*:}" /dev/null "$path"
    printf '%s\n' "$new" >"$path"
    CHANGED=1
}

write_configs() {
    local cpus mem_mib
    cpus=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)  # nproc would obey these
    # All but 10% of the memory (at least 1 GiB) stays with the system, so slurmd never finds less than configured.
    mem_mib=$(awk '/^MemTotal:/ {m = int($2 / 1024); h = int(m / 10); if (h < 1024) h = 1024; print m - h}' \
        /proc/meminfo)
    [[ -s /etc/munge/munge.key ]] || { mungekey --create --keyfile=/etc/munge/munge.key; CHANGED=1; }
    chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
    install -d -o slurm -g slurm /var/spool/slurmctld "$LOGS"
    install -d /var/spool/slurmd
    put 644 root:root /etc/slurm/slurm.conf <<EOF
# Written by bench/slurm/setup.sh: one node, this machine.
ClusterName=$CLUSTER
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=slurm
SlurmdUser=root
AuthType=auth/munge
# A requeued job may start again only once its last launch credential expired (120 s by default).
AuthInfo=cred_expire=10
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
SchedulerType=sched/backfill
# Test the queue every few seconds (not every minute), so a requeued job starts as soon as it may.
SchedulerParameters=sched_interval=2,bf_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobRequeue=1
MinJobAge=10
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
JobAcctGatherType=jobacct_gather/linux
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mib State=UNKNOWN
PartitionName=$PARTITION Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
EOF
    # slurmdbd runs as the slurm user and reaches MariaDB over its socket as the database user of the same name.
    put 600 slurm:slurm /etc/slurm/slurmdbd.conf <<EOF
# Written by bench/slurm/setup.sh: accounting in the local MariaDB.
AuthType=auth/munge
DbdHost=localhost
SlurmUser=slurm
PidFile=/run/slurmdbd.pid
LogFile=$LOGS/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StorageLoc=slurm_acct_db
EOF
}

# pidfile NAME: where the daemon NAME writes its id (set in the configs above and in Debian's MariaDB config).
pidfile() {
    case $1 in
        munged) echo /run/munge/munged.pid ;;
        mariadbd) echo /run/mysqld/mysqld.pid ;;
        *) echo "/run/$1.pid" ;;
    esac
}

# running NAME PIDFILE: the process whose id PIDFILE holds is alive and called NAME.
running() { [[ -s $2 && $(cat "/proc/$(<"$2")/comm" 2>/dev/null) == "$1" ]]; }

# run_daemon NAME COMMAND...: start the daemon NAME with COMMAND, unless one runs already, and record its id.
run_daemon() {
    local name=$1 file
    file=$(pidfile "$1")
    shift
    pgrep -x "$name" >/dev/null && return 0
    rm -f "$file"
    "$@"
    wait_for 60 "$name to start" running "$name" "$file"
    cp "$file" "$STATE/$name.pid"
}

# MariaDB does not fork itself; it keeps to its socket (no TCP port).
mariadb_server() {
    [[ -d /var/lib/mysql/mysql ]] || mariadb-install-db --user=mysql --datadir=/var/lib/mysql >/dev/null
    setsid mariadbd --user=mysql --skip-networking >>"$LOGS/mariadb.log" 2>&1 </dev/null &
}

start() {
    local begin=$SECONDS
    install_packages
    echo "slurm setup: packages ready after $((SECONDS - begin)) s"
    write_configs
    if ((CHANGED)) && [[ -d $STATE ]]; then
        stop  # the daemons started below read the new configs
    fi
    mkdir -p "$STATE"
    install -d -o munge -g munge /run/munge
    install -d -o mysql -g mysql /run/mysqld
    run_daemon munged runuser -u munge -- /usr/sbin/munged
    run_daemon mariadbd mariadb_server
    wait_for 60 MariaDB mariadb-admin ping
    mariadb -e "CREATE USER IF NOT EXISTS slurm@localhost IDENTIFIED VIA unix_socket;
                GRANT ALL ON slurm_acct_db.* TO slurm@localhost;"
    run_daemon slurmdbd slurmdbd
    wait_for 60 slurmdbd sacctmgr -n list cluster
    if [[ -z $(sacctmgr -n -P list cluster "$CLUSTER" format=cluster) ]]; then
        sacctmgr -i -Q add cluster "$CLUSTER" >/dev/null
    fi
    run_daemon slurmctld slurmctld
    run_daemon slurmd slurmd
    wait_for 60 "node $HOST to answer" bash -c "sinfo -h -n '$HOST' -o %t | grep -Eqx 'idle|mix|alloc|comp'"
    wait_for 30 sacct sacct -n -X
    echo "slurm setup: cluster $CLUSTER up, partition $PARTITION, $(nproc) CPUs, in $((SECONDS - begin)) s"
}

# Stop each daemon this script started that still runs under the recorded id: Slurm's first, then those it uses.
stop() {
    local group name names pids
    for group in "slurmd slurmctld slurmdbd" "mariadbd munged"; do
        names=() pids=()
        for name in $group; do
            if running "$name" "$STATE/$name.pid"; then
                names+=("$name") pids+=("$(<"$STATE/$name.pid")")
            fi
            rm -f "$STATE/$name.pid"
        done
        ((${#pids[@]})) || continue
        kill "${pids[@]}"
        wait_for 60 "${names[*]} to stop" bash -c "! kill -0 ${pids[*]} 2>/dev/null"
        # slurmctld and slurmdbd (run as slurm) cannot remove their pid files in /run; a stale slurmctld.pid makes
        # Debian's package removal try to cancel jobs, and fail.
        for name in "${names[@]}"; do rm -f "$(pidfile "$name")"; done
    done
    rmdir "$STATE" 2>/dev/null || true
    echo "slurm setup: stopped"
}

# submit ARGS...: sbatch --wait (the job's exit status is sbatch's) and print the job id.
submit() { sbatch --parsable --wait -o "$OUT/%j.out" "$@"; }

check() {
    local begin=$SECONDS id
    OUT=$(mktemp -d)
    id=$(submit --wrap 'echo hi') || die "batch job failed"
    [[ $(<"$OUT/$id.out") == hi ]] || die "batch job $id printed $(<"$OUT/$id.out")"
    wait_for 30 "job $id COMPLETED in sacct" bash -c "sacct -n -X -P -j $id -o State | grep -qx COMPLETED"
    srun -n1 true
    id=$(submit -n 2 --wrap 'srun hostname') || die "2-task job failed"
    [[ $(wc -l <"$OUT/$id.out") == 2 ]] || die "2-task job $id printed $(<"$OUT/$id.out")"
    rm -r "$OUT"
    echo "slurm setup: check passed in $((SECONDS - begin)) s"
}

[[ $(id -u) == 0 ]] || die "run as root"
case ${1:-} in
    "") start ;;
    --check) check ;;
    --stop) stop ;;
    *) die "usage: $0 [--check|--stop]" ;;
esac
