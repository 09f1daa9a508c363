#!/bin/sh
# Submits a pfedmma federation to Slurm: the coordinator (coordinator.sbatch),
# then the sites as a job array of PFEDMMA_TASKS multi-client processes
# (sites.sbatch), started once the coordinator's job has started.
#
#   PFEDMMA_CLIENTS=50 PFEDMMA_TASKS=5 deploy/slurm/submit.sh
#
# Run it from the shared folder holding certs/ (or set PFEDMMA_WORK); extra
# sbatch options (partition, account) go in SBATCH_* variables, e.g.
# SBATCH_PARTITION=cpu. See deploy/README.md.
set -eu
: "${PFEDMMA_CLIENTS:?set PFEDMMA_CLIENTS to the number of clients (federation.clients)}"
: "${PFEDMMA_TASKS:=1}"
here=$(cd "$(dirname "$0")" && pwd)
if [ ! -f "${PFEDMMA_WORK:-.}/certs/sites.txt" ]; then
	echo "no certs/sites.txt in ${PFEDMMA_WORK:-.}: make the certificates first (pfedmma certs init, see deploy/README.md)" >&2
	exit 1
fi
export PFEDMMA_CLIENTS PFEDMMA_TASKS
coord=$(sbatch --parsable "$here/coordinator.sbatch")
coord=${coord%%;*}
PFEDMMA_COORD_JOB=$coord
export PFEDMMA_COORD_JOB
sites=$(sbatch --parsable --array="0-$((PFEDMMA_TASKS - 1))" --dependency="after:$coord" "$here/sites.sbatch")
echo "coordinator: job $coord; sites: array job ${sites%%;*} ($PFEDMMA_TASKS tasks, $PFEDMMA_CLIENTS clients)"
