// Package wire decodes the ingest server's request bodies: job
// registrations, rank joins and stage-vector batches in JSON or the
// laggard.v1 protobuf encoding (api/laggard/v1/ingest.proto).
//
// Every decoder is strict and bounded: unknown fields are rejected, bodies
// larger than the caller's limit fail with ErrTooLarge, and every decoded
// value is validated against the job. Validation failures are
// *signal.FieldError whose Field is the full path from the body's root
// ("vectors[3].durations_ms"), so a 400 tells the client exactly what to
// fix and a batch is accepted whole or not at all.
package laggardv1

//go:generate ../../scripts/genproto.sh
