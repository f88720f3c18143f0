package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"strings"

	"github.com/laggard-dev/laggard/internal/auth"
)

// runToken makes a random token and prints the line for the -tokens file,
// which holds only the token's SHA-256, so the file is no secret.
func runToken(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("token", "[flags] [NAME]", stderr)
	scopes := fs.String("scopes", "read", "comma-separated scopes: read, admin, ingest, ingest:JOB, ingest:PREFIX*")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if _, err := auth.ParseScopes(*scopes); err != nil {
		return fmt.Errorf("-scopes: %w", err)
	}
	name := strings.Join(fs.Args(), " ")
	if strings.ContainsAny(name, "#\n\r") {
		return fmt.Errorf("the name must not contain '#' or a line break")
	}
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	tok := "lg_" + base64.RawURLEncoding.EncodeToString(b[:])
	line := strings.TrimSpace(auth.Hash(tok) + " " + *scopes + " " + name)
	_, err := fmt.Fprintf(stdout, "# Append this line to the -tokens file (it holds only the token's hash):\n%s\n"+
		"# The token, shown only now; give it to the client (LAGGARD_TOKEN=..., or Authorization: Bearer ...):\n%s\n", line, tok)
	return err
}
