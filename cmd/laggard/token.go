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

// runToken makes a random token and prints the line for the -tokens file
// (stdout), which holds only the token's SHA-256, so the file is no
// secret; the token goes to stderr.
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
	// The file line goes to stdout, so `laggard token ... >> tokens`
	// appends it; the token itself goes to stderr (the terminal), never
	// into the file.
	if _, err := fmt.Fprintf(stderr, "laggard token: the token, shown only now; give it to the client (LAGGARD_TOKEN=..., or Authorization: Bearer ...):\n%s\n"+
		"laggard token: its line for the -tokens file (hash only) is on stdout: append it, e.g. laggard token ... >> tokens\n", tok); err != nil {
		return err
	}
	_, err := fmt.Fprintln(stdout, line)
	return err
}
