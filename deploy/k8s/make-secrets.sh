#!/bin/sh
# Makes (or updates) the federation's Secrets from a certificates folder made
# beforehand with `pfedmma certs init` (see deploy/README.md):
#   pfedmma-coordinator  ca.crt, coordinator.crt/.key, sites.txt, revoked.txt
#   pfedmma-federation   ca.crt, sites.txt (what every site needs besides its pair)
#   pfedmma-sites        every site's NAME.crt and NAME.key
#   pfedmma-operator     operators/NAME.crt/.key, when --operator NAME is given
#                        (an in-cluster scraper of /metrics; keep the others off-cluster)
# ca.key never enters the cluster. Re-run after `pfedmma certs revoke`: the
# mounted revoked.txt follows within a minute and the coordinator re-reads it
# at every handshake.
#
#   deploy/k8s/make-secrets.sh CERTS_DIR [--operator NAME]
set -eu
dir=${1:?usage: make-secrets.sh CERTS_DIR [--operator NAME]}
ns=${PFEDMMA_NAMESPACE:-pfedmma}
operator=
if [ "${2:-}" = "--operator" ]; then
	operator=${3:?--operator needs a name}
fi
for f in ca.crt coordinator.crt coordinator.key sites.txt; do
	if [ ! -f "$dir/$f" ]; then
		echo "make-secrets.sh: $dir/$f is missing (make the folder with pfedmma certs init)" >&2
		exit 1
	fi
done
[ -f "$dir/revoked.txt" ] || : > "$dir/revoked.txt"
apply() { kubectl -n "$ns" create secret generic "$@" --dry-run=client -o yaml | kubectl apply -f -; }
apply pfedmma-coordinator --from-file="$dir/ca.crt" --from-file="$dir/coordinator.crt" \
	--from-file="$dir/coordinator.key" --from-file="$dir/sites.txt" --from-file="$dir/revoked.txt"
apply pfedmma-federation --from-file="$dir/ca.crt" --from-file="$dir/sites.txt"
apply pfedmma-sites --from-file="$dir/sites/"
if [ -n "$operator" ]; then
	apply pfedmma-operator --from-file="$dir/ca.crt" --from-file="$dir/operators/$operator.crt" \
		--from-file="$dir/operators/$operator.key"
fi
