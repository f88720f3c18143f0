// Package stagefile reads and writes exported stage matrices: the JSONL
// form (a {"job": ...} header line, then one StageVector per line) used by
// the server's export endpoint and the evaluation harness, and a CSV form
// (step,rank,micro,<stages...>,wall_ms[,data_lead,dropped]) for matrices
// produced by other tools. Either may be gzip-compressed (recognised by
// its magic bytes). ReadFiles merges several files, such as one per rank,
// into one job. Decoders stream, validate every vector against the job
// and name the offending file, line and field.
package stagefile
