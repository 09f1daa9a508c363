#!/bin/sh
# Runs the Slurm scripts on this one machine, as root, with Debian's slurm-wlm
# (apt-get install -y slurm-wlm): a throwaway slurmctld + slurmd (no munge:
# auth/none, ports 16817-16818) configured in a temporary folder, a 5-client
# world job as the coordinator job plus a 2-task sites array, and a check that
# the coordinator's global tensors equal `pfedmma run`'s, byte for byte. It
# stops the daemons it started. Not part of CI (it needs root and starts
# daemons); see deploy/README.md.
#
#   sudo deploy/slurm/single-node-check.sh path/to/pfedmma
set -eu
bin=$(cd "$(dirname "${1:?usage: single-node-check.sh PFEDMMA_BINARY}")" && pwd)/$(basename "$1")
here=$(cd "$(dirname "$0")" && pwd)
for p in slurmctld slurmd sbatch; do
	command -v "$p" > /dev/null || { echo "$p missing: apt-get install -y slurm-wlm" >&2; exit 1; }
done
tmp=$(mktemp -d /tmp/pfedmma-slurm.XXXXXX)
node=$(hostname -s)
mkdir -p "$tmp/state" "$tmp/spool" "$tmp/fed/bin"
cat > "$tmp/slurm.conf" << CONF
ClusterName=pfedmmacheck
SlurmctldHost=$node
AuthType=auth/none
CredType=cred/none
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/slurmctld.log
SlurmdLogFile=$tmp/slurmd.log
SlurmctldPort=16817
SlurmdPort=16818
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
NodeName=$node CPUs=16 RealMemory=20000 State=UNKNOWN
PartitionName=check Nodes=$node Default=YES MaxTime=INFINITE State=UP
CONF
SLURM_CONF=$tmp/slurm.conf
export SLURM_CONF
stop() {
	for d in slurmd slurmctld; do
		if [ -s "$tmp/$d.pid" ]; then kill "$(cat "$tmp/$d.pid")" 2> /dev/null || true; fi
	done
}
trap stop EXIT
slurmctld -f "$SLURM_CONF"
sleep 1
slurmd -f "$SLURM_CONF"
sleep 3
sinfo

cp "$bin" "$tmp/fed/bin/pfedmma"
cd "$tmp/fed"
PATH="$tmp/fed/bin:$PATH"
export PATH
pfedmma certs init --dir certs --sites "$(seq -s, -f 'c%03g' 0 4)" --host "$node"
pfedmma run --quiet --out sim --preset world-deploy --set federation.clients=5 --set federation.rounds=3 > sim.txt
SBATCH_MEM_PER_NODE=2G PFEDMMA_THREADS=1 PFEDMMA_CLIENTS=5 PFEDMMA_TASKS=2 \
	PFEDMMA_ARGS='--preset world-deploy --set federation.rounds=3' "$here/submit.sh"
waited=0
until [ -f coordinator/out/global/pfedmma.safetensors ] && [ -z "$(squeue -h)" ]; do
	if [ "$waited" -ge 300 ]; then
		echo "the federation did not finish in 5 minutes; logs in $tmp/fed" >&2
		squeue
		exit 1
	fi
	sleep 2
	waited=$((waited + 2))
done
cat pfedmma-coordinator-*.out | tail -n 6
for c in 0 1 2 3 4; do
	f=$(printf 'sites/site-c%03d/sites/pfedmma/client_%03d.safetensors' "$c" "$c")
	[ -s "$f" ] || { echo "client $c kept nothing ($f)" >&2; exit 1; }
done
if cmp sim/global/pfedmma.safetensors coordinator/out/global/pfedmma.safetensors; then
	echo "Slurm federation = pfedmma run (global tensors byte for byte); files in $tmp/fed"
else
	echo "the Slurm federation's global tensors differ from pfedmma run's; files in $tmp/fed" >&2
	exit 1
fi
