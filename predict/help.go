package predict

// PredictHelp is the long help of `pfedmma predict`.
const PredictHelp = `Classify images with the model one site (client) ended a finished run with.

The run folder's run.json names the model, the prompt template and the label
spaces; the site's trained tensors come from the run's per-site files
(sites/METHOD/, or adapters/ in a pFedMMA run from before that layout).
--method picks one of the run's methods (default: the first it trained;
pfedmma in the default run). --space picks the label space (default: the one
the site trained over; "all" means every class of the dataset). Images may
follow --image as further arguments.

The run folder may move: run.json names its own files relative to it, and
identifies the model by its SHA-256 (model_sha256). A run on the embedded
model finds it on any machine; for another model not at run.json's path
there, give it with --model (it must be the same model: same SHA-256).
For a federation coordinated by pfedmma serve, each site keeps its file in
its own state folder: copy it into the run folder's sites/METHOD/ first.`
