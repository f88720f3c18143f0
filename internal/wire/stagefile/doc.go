// Package stagefile reads and writes exported stage matrices: the JSONL
// form (a {"job": ...} header line, then one StageVector per line) used by
// the server's export endpoint and the evaluation harness, and a CSV form
// (step,rank,micro,<stages...>,wall_ms[,data_lead,dropped]) for matrices
// produced by other tools. Decoders stream, validate every vector against
// the job and name the offending line and field.
package stagefile
