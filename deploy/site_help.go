package deploy

// SiteHelp is the long help of `pfedmma site`.
const SiteHelp = `Join the federation coordinated by 'pfedmma serve' as site SITE (its certificate's CN; the
i-th site of 'certs init --sites' is client i). The site receives the experiment from the
coordinator when it registers (methods and their settings, protocol, rounds, seeds, and the
model's SHA-256) and builds its client from it; its data, model, vocabulary, state, threads
and cache stay its own: a task setting one of them is refused, naming the key. With --data
world the site generates the world and trains on its share (client i of the protocol); with
--data DIR it reads the experiment's dataset from DIR.

A site never downloads weights: the model must be the embedded one or --model FILE, with the
coordinator's SHA-256. At acceptance the site computes from the task's method and settings
the tensors it uploads each round (names, shapes, bytes), logs them and writes them to
STATE/uploads.json; it refuses to send anything else. Without secure aggregation the
coordinator sees each of these uploads; with federation.secure_aggregation it receives them
masked and learns their sum. --policy FILE (YAML: methods, settings, max_upload_mib,
max_download_mib, require_secure_aggregation, min_participants) or its shorthand flags
--accept-methods, --max-upload-mib (checked against the site's own computation and every real
upload, a masked value counting 8 bytes), --require-secure-aggregation (also implied by a task
with federation.secure_aggregation: true: no upload in the clear), --min-participants and
--max-download-mib refuse tasks the site does not accept; a refused task is logged on both
sides and the site exits non-zero with the reason.
--config/--preset/--set stay allowed for scripted setups: the coordinator then refuses a site
whose experiment differs, naming the settings (--set of site-local keys alone, threads=… or
cache.…, only tune the site).

Private parameters, optimizer and random state stay in --state (default ./site-SITE), with the
task received (task.yaml), the site's metrics (metrics.jsonl) and, at the end, its
personalised parameters (sites/METHOD/client_NNN.safetensors, the file 'pfedmma run' writes
for client NNN). It retries while the coordinator is away (its log says for how long so far) and exits 0
when the federation ends, recording the end in STATE/state/federation-over.json: started again
on that folder for the same coordinator (address and CA), a site whose federation finished
exits 0 at once saying so (give another --state to join a new federation); after a stop
(SIGTERM on serve) it waits for the coordinator to be restarted.
With --clients instead of --name, one process hosts several clients (a simulation spread over
a few machines): each speaks with its own certificate and keeps its own folder,
STATE/site-NAME (--state default: the working folder); they share the loaded model and take
turns to train.`

// ServeHelp is the long help of `pfedmma serve`.
const ServeHelp = `Run the coordinator of a federation configured exactly as 'pfedmma run' is (one trained
method). Sites ('pfedmma site') connect with the certificates made by 'pfedmma certs init';
the i-th site of --sites there is client i. Each site receives the experiment (the resolved
configuration and the model's SHA-256) when it registers: sites need no experiment flags.
The coordinator's state (rounds, strategy, sampler, received updates) lives in an SQLite
database in --state: restarted with the same flags after a crash it resumes where it stopped. After the last round it writes the run's
outputs (config.yaml, run.json, summary.json, report.md, figures, metrics,
global/METHOD.safetensors) to --out and exits 0.
--http serves the live dashboard, /metrics (Prometheus) and /healthz.`
