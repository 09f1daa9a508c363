#!/bin/sh
# the README walkthrough as written (without --http/--linger): serve + 3 sites, world-deploy
cd "${1:-.}"
B=${PFEDMMA:-pfedmma}
$B certs init --dir certs --sites site-a,site-b,site-c > certs.log 2>&1
$B serve --listen 127.0.0.1:17443 --certs certs --state coord --min-fit 2 --register-timeout 1m --offline-after 15s --preset world-deploy > serve.log 2>&1 &
for s in site-a site-b site-c; do
  $B site --server 127.0.0.1:17443 --certs certs --name $s --data world > $s.log 2>&1 &
done
wait
# started again after the end: each exits 0 at once saying so
for s in site-a site-b site-c; do
  $B site --server 127.0.0.1:17443 --certs certs --name $s --data world > $s.again.log 2>&1; echo "$s again: exit $?" >> again.txt
done
echo finished > done
