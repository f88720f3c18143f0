// Package ui serves laggard's embedded single-page web UI: a job list with
// each job's current diagnosis and open incident; incident pages
// (incident.js: the timeline of incidentchart.js, the cause chain,
// competing hypotheses, links into every engine view on the incident's
// windows, the audit log) and the cluster page (cluster.js: open
// incidents across jobs, the fleet of hosts and links behind them); and a
// job page that opens on its incidents (incidents.js), then the plain-language
// headline, the step-time axis with change points and brushable windows,
// stage shares against a reference, the rank × stage heatmap with a rank
// drill-down, role groups, a torch.profiler snippet aimed at the suspect
// ranks, and the evidence details. Beside it, the collective analysis
// (Greyhound, greyhound.js): iteration time with change points and the
// controller's phases, its verdict, group comparison, entry lateness and
// validation results. Below, the CPU profiles (SysOM-AI, sysom.js): the
// layered diagnosis report, flame graphs per rank or group and
// differential ones (flame.js, flamediff.js, drawn by the d3-flame-graph
// component vendored under static/vendor/) and the OS signal panels
// (osstat.js). Last, the operator traces (KAIR, kair.js): the capture list
// with "Capture now", the K-S heatmap and score bars of Stage 1, the
// per-rank completion rhythm (Fig. 4), the blame chain of an analysed
// step and a per-rank step timeline.
//
// The page is plain HTML/CSS and ES modules (static/js/, one per view),
// embedded with go:embed — no build step, no CDN — and talks only to the
// same-origin JSON API under /api/v1/. View state lives in the URL hash.
// static/js/vocab.js is generated from internal/signal/stagevec.
//
// The tests run the real analysis on simulated jobs (internal/sim): the
// fixtures in testdata/ are its output, the fake API computes any other
// report query, and the browser tests drive headless Chromium over it.
// The incident fixtures (testdata/incidents/) are internal/incident values
// built from the same scenarios.
package ui
