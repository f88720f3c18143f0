// Package server is laggard's HTTP server: job registration and rank
// joins, stage-vector ingest (JSON or protobuf), window reports, stage
// matrix export, Prometheus metrics and the embedded web UI.
//
// Ingest is decoupled from storage by a bounded queue drained by one
// writer goroutine. The writer group-commits every batch waiting in the
// queue with a single Store.AppendMany (one fsync for many requests) and
// only then acknowledges each request, so a 200 always means durable.
// When the queue is full the server sheds load with 429 + Retry-After
// instead of letting latency and memory grow without bound; clients back
// off and retry.
package server
