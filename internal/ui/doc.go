// Package ui serves laggard's embedded single-page web UI: a job list and a
// per-job StageFrontier report view (step-time series, stage shares, the
// rank×stage lag heatmap, labels and baselines). The page is plain
// HTML/CSS/JS embedded with go:embed — no build step, no CDN — and talks only
// to the same-origin JSON API under /api/v1/.
package ui
