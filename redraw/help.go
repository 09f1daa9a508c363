package redraw

// Help is the long help of `pfedmma report`, which runs Redraw.
const Help = `Re-draw the figures (curves.png/svg: one panel per metric; final.png/svg: the
final bars) and report.md of each finished run folder from its metrics.jsonl and
summary.json. With several run folders (one per dataset, same methods) it also
writes into --out the table averaged over the datasets (summary.json, report.md)
and, for three datasets or more, a radar chart of the headline metric
(radar.png/svg: HM for base-to-novel, else accuracy), and the headline metric per
dataset and method (pFedMoAP's Table 1 layout). A leave-one-domain-out run over
every held-out domain (lodo.json) is re-drawn as its accuracy matrices, G/P/C and
generalisation tables; several of them (datasets) give FedOT's Table 1.`
